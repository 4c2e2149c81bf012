//go:build !slim && (provider_aws || (!provider_aws && !provider_azure && !provider_gcp && !provider_local && !provider_openstack))

// build/genproviders writes the build constraint (providers/all's selection): this file is built
// exactly when the AWS provider is, so a provider build links no other provider's fake or SDK.

package main

import (
	"net"
	"net/http"

	"github.com/machinist-io/machinist/providers/kit/fakekit"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/providers/aws"
	"github.com/machinist-io/machinist/providers/aws/fakeaws"
)

func init() {
	addFakecloud("aws", "serve a fake Amazon EC2 (and STS) in EC2's query protocol over loopback HTTP",
		func(l net.Listener, observe func(http.Handler) http.Handler) (servedFake, error) {
			c := fakeaws.New(fakeaws.Options{})
			c.SeedDemo()
			srv, err := c.Serve(l, observe)
			if err != nil {
				return nil, err
			}
			return fakeAWS{c: c, srv: srv}, nil
		})
}

type fakeAWS struct {
	c   *fakeaws.Cloud
	srv *fakekit.Server
}

func (f fakeAWS) URL() string  { return f.srv.URL + "/" }
func (f fakeAWS) State() any   { return f.c.State() }
func (f fakeAWS) Close() error { return f.srv.Close() }

func (f fakeAWS) Secret() *corev1.Secret {
	return fakeSecret("fakeaws", map[string]string{
		aws.KeyAccessKeyID:     fakeaws.DemoAccessKeyID,
		aws.KeySecretAccessKey: fakeaws.DemoSecretAccessKey,
		aws.KeyEC2Endpoint:     f.srv.URL,
		aws.KeyUserData:        fakeUserData,
	})
}
