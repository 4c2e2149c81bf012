package openstack

import (
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/providers/kit"
)

func init() {
	kit.Register(ProviderName, "OpenStack: Nova servers, Neutron ports and Cinder root volumes (Gardener-compatible provider spec)", specs.Check,
		func(o kit.Options, _ registry.Env) driver.Driver { return New(Options{Options: o}) })
}
