package azure

import "github.com/machinist-io/machinist/providers/kit"

func init() {
	kit.Register(ProviderName, "Azure VMs with their own NIC and managed disks (Gardener-compatible provider spec)", specs.Check, open)
}
