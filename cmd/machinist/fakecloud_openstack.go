//go:build !slim && (provider_openstack || (!provider_aws && !provider_azure && !provider_gcp && !provider_local && !provider_openstack))

// build/genproviders writes the build constraint (providers/all's selection): this file is built
// exactly when the OpenStack provider is, so a provider build links no other provider's fake or SDK.

package main

import (
	"net"
	"net/http"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/providers/kit/fakekit"
	"github.com/machinist-io/machinist/providers/openstack"
	"github.com/machinist-io/machinist/providers/openstack/fakeopenstack"
)

func init() {
	addFakecloud("openstack", "serve a fake OpenStack (Keystone, Nova, Neutron, Cinder, Glance) over loopback HTTP",
		func(l net.Listener, observe func(http.Handler) http.Handler) (servedFake, error) {
			c := fakeopenstack.New(fakeopenstack.Options{})
			srv, err := c.Serve(l, observe)
			if err != nil {
				return nil, err
			}
			return fakeOpenStack{c: c, srv: srv}, nil
		})
}

type fakeOpenStack struct {
	c   *fakeopenstack.Cloud
	srv *fakekit.Server
}

func (f fakeOpenStack) URL() string  { return f.srv.URL + "/" }
func (f fakeOpenStack) State() any   { return f.c.State() }
func (f fakeOpenStack) Close() error { return f.srv.Close() }

func (f fakeOpenStack) Secret() *corev1.Secret {
	data := map[string]string{openstack.KeyUserData: fakeUserData}
	for k, v := range f.c.PasswordSecret() {
		data[k] = string(v)
	}
	return fakeSecret("fakeopenstack", data)
}
