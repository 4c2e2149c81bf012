//go:build !slim && (provider_gcp || (!provider_aws && !provider_azure && !provider_gcp && !provider_local && !provider_openstack))

// build/genproviders writes the build constraint (providers/all's selection): this file is built
// exactly when the GCP provider is, so a provider build links no other provider's fake or SDK.

package main

import (
	"net"
	"net/http"

	"github.com/machinist-io/machinist/providers/kit/fakekit"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/providers/gcp"
	"github.com/machinist-io/machinist/providers/gcp/fakegcp"
)

func init() {
	addFakecloud("gcp", "serve a fake Google Compute Engine (the Compute API and OAuth 2.0 token endpoints) over loopback HTTPS with its own CA",
		func(l net.Listener, observe func(http.Handler) http.Handler) (servedFake, error) {
			c := fakegcp.New(fakegcp.Options{})
			srv, err := c.Serve(l, observe)
			if err != nil {
				return nil, err
			}
			return fakeGCP{c: c, srv: srv, key: c.SeedDemo(fakegcp.TokenURL(srv.URL))}, nil
		})
}

type fakeGCP struct {
	c   *fakegcp.Cloud
	srv *fakekit.Server
	key []byte
}

func (f fakeGCP) URL() string  { return f.srv.URL }
func (f fakeGCP) State() any   { return f.c.State() }
func (f fakeGCP) Close() error { return f.srv.Close() }

func (f fakeGCP) Secret() *corev1.Secret {
	return fakeSecret("fakegcp", map[string]string{
		gcp.KeyServiceAccountJSON: string(f.key),
		gcp.KeyComputeEndpoint:    fakegcp.ComputeEndpoint(f.srv.URL),
		gcp.KeyCACert:             string(f.srv.CACert),
		gcp.KeyUserData:           fakeUserData,
	})
}
