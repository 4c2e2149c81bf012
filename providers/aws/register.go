package aws

import "github.com/machinist-io/machinist/providers/kit"

func init() {
	kit.Register(ProviderName, "Amazon EC2 instances with their EBS volumes and network interfaces (Gardener-compatible provider spec)", specs.Check, open)
}
