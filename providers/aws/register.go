package aws

import (
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
)

func init() {
	registry.Register(registry.Registration{
		Name:        Name,
		Description: "Amazon EC2 instances with their EBS volumes and network interfaces (Gardener-compatible provider spec)",
		New: func(env registry.Env) (driver.Driver, error) {
			return New(Options{Log: env.Logger(), SpecMode: env.SpecMode, AmbientCredentials: env.AmbientCredentialsFor(Name)}), nil
		},
		CheckSpec: checkSpec,
	})
}
