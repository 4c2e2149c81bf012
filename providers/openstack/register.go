package openstack

import "github.com/machinist-io/machinist/providers/kit"

func init() {
	kit.Register(ProviderName, "OpenStack: Nova servers, Neutron ports and Cinder root volumes (Gardener-compatible provider spec)", specs.Check, open)
}
