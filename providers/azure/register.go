package azure

import (
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
)

func init() {
	registry.Register(registry.Registration{
		Name:        ProviderName,
		Description: "Azure VMs with their own NIC and managed disks (Gardener-compatible provider spec)",
		New: func(env registry.Env) (driver.Driver, error) {
			return New(Options{Log: env.Logger(), SpecMode: env.SpecMode}), nil
		},
		CheckSpec: checkSpec,
	})
}
