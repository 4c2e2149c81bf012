//go:build !slim && (provider_azure || (!provider_aws && !provider_azure && !provider_gcp && !provider_local && !provider_openstack))

// build/genproviders writes the build constraint (providers/all's selection): this file is built
// exactly when the Azure provider is, so a provider build links no other provider's fake or SDK.

package main

import (
	"net"
	"net/http"

	"github.com/machinist-io/machinist/providers/azure"
	"github.com/machinist-io/machinist/providers/azure/fakeazure"
)

func init() {
	addFakecloud("azure", "serve a fake Azure (Microsoft Entra ID and Resource Manager) over loopback HTTPS with its own CA",
		func(l net.Listener, observe func(http.Handler) http.Handler) (*servedFake, error) {
			c := fakeazure.New(fakeazure.Options{})
			c.SeedDemo()
			// Long-running operations complete at once: the driver's poll interval is seconds.
			c.SetLROPolls(0)
			srv, err := c.Serve(l, observe)
			if err != nil {
				return nil, err
			}
			return &servedFake{srv: srv, state: func() any { return c.State() }, secret: map[string]string{
				azure.KeyClientID:                     fakeazure.DemoClientID,
				azure.KeyClientSecret:                 fakeazure.DemoClientSecret,
				azure.KeyTenantID:                     c.TenantID(),
				azure.KeySubscriptionID:               c.SubscriptionID(),
				azure.KeyActiveDirectoryAuthorityHost: srv.URL + "/",
				azure.KeyResourceManagerEndpoint:      srv.URL + "/",
				azure.KeyCACert:                       string(srv.CACert),
			}}, nil
		})
}
