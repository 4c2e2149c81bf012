package gcp

import "github.com/machinist-io/machinist/providers/kit"

func init() {
	kit.Register(ProviderName, "Google Compute Engine instances with their disks (Gardener-compatible provider spec)", specs.Check, open)
}
