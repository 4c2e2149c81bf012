package aws

import (
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/providers/kit"
)

func init() {
	kit.Register(ProviderName, "Amazon EC2 instances with their EBS volumes and network interfaces (Gardener-compatible provider spec)", specs.Check,
		func(o kit.Options, env registry.Env) driver.Driver {
			return New(Options{Options: o, AmbientCredentials: env.AmbientCredentialsFor(ProviderName)})
		})
}
