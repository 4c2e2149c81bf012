package memdriver

import (
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
)

const description = "in-memory reference driver for tests: VMs live in the process's memory"

// Registration describes the mem provider for registry.Register. Each call of its New opens a
// driver over a new, empty Cloud (registry.Resolver opens a provider once per process); reach
// the backend with (*Driver).Cloud, or use Cloud.Registration to choose it.
func Registration() registry.Registration {
	return registry.Registration{
		Name:        ProviderName,
		Description: description,
		New: func(env registry.Env) (driver.Driver, error) {
			return newWithLogger(NewCloud(), env), nil
		},
	}
}

// Registration describes the mem provider for registry.Register with drivers over this cloud.
func (c *Cloud) Registration() registry.Registration {
	return registry.Registration{
		Name:        ProviderName,
		Description: description,
		New: func(env registry.Env) (driver.Driver, error) {
			return newWithLogger(c, env), nil
		},
	}
}

func newWithLogger(c *Cloud, env registry.Env) *Driver {
	d := New(c)
	d.log = env.Logger().With("provider", ProviderName)
	return d
}
