//go:build !slim && (provider_azure || (!provider_aws && !provider_azure && !provider_gcp && !provider_local && !provider_openstack))

// build/genproviders writes the build constraint (providers/all's selection): this file is built
// exactly when the Azure provider is, so a provider build links no other provider's fake or SDK.

package main

import (
	"net"
	"net/http"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/providers/azure"
	"github.com/machinist-io/machinist/providers/azure/fakeazure"
	"github.com/machinist-io/machinist/providers/kit/fakekit"
)

func init() {
	addFakecloud("azure", "serve a fake Azure (Microsoft Entra ID and Resource Manager) over loopback HTTPS with its own CA",
		func(l net.Listener, observe func(http.Handler) http.Handler) (servedFake, error) {
			c := fakeazure.New(fakeazure.Options{})
			c.SeedDemo()
			// Long-running operations complete at once: the driver's poll interval is seconds.
			c.SetLROPolls(0)
			srv, err := c.Serve(l, observe)
			if err != nil {
				return nil, err
			}
			return fakeAzure{c: c, srv: srv}, nil
		})
}

type fakeAzure struct {
	c   *fakeazure.Cloud
	srv *fakekit.Server
}

func (f fakeAzure) URL() string  { return f.srv.URL + "/" }
func (f fakeAzure) State() any   { return f.c.State() }
func (f fakeAzure) Close() error { return f.srv.Close() }

func (f fakeAzure) Secret() *corev1.Secret {
	return fakeSecret("fakeazure", map[string]string{
		azure.KeyClientID:                     fakeazure.DemoClientID,
		azure.KeyClientSecret:                 fakeazure.DemoClientSecret,
		azure.KeyTenantID:                     f.c.TenantID(),
		azure.KeySubscriptionID:               f.c.SubscriptionID(),
		azure.KeyActiveDirectoryAuthorityHost: f.srv.URL + "/",
		azure.KeyResourceManagerEndpoint:      f.srv.URL + "/",
		azure.KeyCACert:                       string(f.srv.CACert),
		azure.KeyUserData:                     fakeUserData,
	})
}
