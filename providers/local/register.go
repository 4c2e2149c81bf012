package local

import (
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
)

func init() {
	registry.Register(registry.Registration{
		Name:        ProviderName,
		Description: "machines as real Nodes of the target cluster, run by in-process node agents (no cloud needed)",
		New:         func(env registry.Env) (driver.Driver, error) { return New(env) },
		CheckSpec:   checkSpec,
	})
}
