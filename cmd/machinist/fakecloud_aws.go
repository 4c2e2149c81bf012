//go:build !slim && (provider_aws || (!provider_aws && !provider_azure && !provider_gcp && !provider_local && !provider_openstack))

// build/genproviders writes the build constraint (providers/all's selection): this file is built
// exactly when the AWS provider is, so a provider build links no other provider's fake or SDK.

package main

import (
	"net"
	"net/http"

	"github.com/machinist-io/machinist/providers/aws"
	"github.com/machinist-io/machinist/providers/aws/fakeaws"
)

func init() {
	addFakecloud("aws", "serve a fake Amazon EC2 (and STS) in EC2's query protocol over loopback HTTP",
		func(l net.Listener, observe func(http.Handler) http.Handler) (*servedFake, error) {
			c := fakeaws.New(fakeaws.Options{})
			c.SeedDemo()
			srv, err := c.Serve(l, observe)
			if err != nil {
				return nil, err
			}
			return &servedFake{srv: srv, state: func() any { return c.State() }, secret: map[string]string{
				aws.KeyAccessKeyID:     fakeaws.DemoAccessKeyID,
				aws.KeySecretAccessKey: fakeaws.DemoSecretAccessKey,
				aws.KeyEC2Endpoint:     srv.URL,
			}}, nil
		})
}
