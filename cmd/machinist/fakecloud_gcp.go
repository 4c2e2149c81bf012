//go:build !slim && (provider_gcp || (!provider_aws && !provider_azure && !provider_gcp && !provider_local && !provider_openstack))

// build/genproviders writes the build constraint (providers/all's selection): this file is built
// exactly when the GCP provider is, so a provider build links no other provider's fake or SDK.

package main

import (
	"net"
	"net/http"

	"github.com/machinist-io/machinist/providers/gcp"
	"github.com/machinist-io/machinist/providers/gcp/fakegcp"
)

func init() {
	addFakecloud("gcp", "serve a fake Google Compute Engine (the Compute API and OAuth 2.0 token endpoints) over loopback HTTPS with its own CA",
		func(l net.Listener, observe func(http.Handler) http.Handler) (*servedFake, error) {
			c := fakegcp.New(fakegcp.Options{})
			srv, err := c.Serve(l, observe)
			if err != nil {
				return nil, err
			}
			return &servedFake{srv: srv, state: func() any { return c.State() }, secret: map[string]string{
				gcp.KeyServiceAccountJSON: string(c.SeedDemo(fakegcp.TokenURL(srv.URL))),
				gcp.KeyComputeEndpoint:    fakegcp.ComputeEndpoint(srv.URL),
				gcp.KeyCACert:             string(srv.CACert),
			}}, nil
		})
}
