//go:build !slim && (provider_openstack || (!provider_aws && !provider_azure && !provider_gcp && !provider_local && !provider_openstack))

// build/genproviders writes the build constraint (providers/all's selection): this file is built
// exactly when the OpenStack provider is, so a provider build links no other provider's fake or SDK.

package main

import (
	"net"
	"net/http"

	"github.com/machinist-io/machinist/providers/openstack/fakeopenstack"
)

func init() {
	addFakecloud("openstack", "serve a fake OpenStack (Keystone, Nova, Neutron, Cinder, Glance) over loopback HTTP",
		func(l net.Listener, observe func(http.Handler) http.Handler) (*servedFake, error) {
			c := fakeopenstack.New(fakeopenstack.Options{})
			srv, err := c.Serve(l, observe)
			if err != nil {
				return nil, err
			}
			secret := map[string]string{}
			for k, v := range c.PasswordSecret() {
				secret[k] = string(v)
			}
			return &servedFake{srv: srv, state: func() any { return c.State() }, secret: secret}, nil
		})
}
