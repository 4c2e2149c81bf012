package mtls_test

import (
	"crypto/x509"
	"net/url"
	"reflect"
	"testing"

	"github.com/machinist-io/machinist/grpcbridge/mtls"
)

func certWithURIs(t *testing.T, uris ...string) *x509.Certificate {
	c := &x509.Certificate{}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		c.URIs = append(c.URIs, u)
	}
	return c
}

func TestAuthorizedProviders(t *testing.T) {
	c := certWithURIs(t,
		"machinist://provider/openstack",
		"MACHINIST://Provider/Azure",
		"machinist://provider/",           // empty name: ignored
		"machinist://provider/a/b",        // nested path: ignored
		"spiffe://cluster/ns/x/sa/y",      // another scheme: ignored
		"machinist://somethingelse/local", // another host: ignored
		"machinist://provider/openstack",  // duplicate
	)
	if got, want := mtls.AuthorizedProviders(c), []string{"azure", "openstack"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for name, want := range map[string]bool{"openstack": true, "OpenStack": true, "azure": true, "local": false, "": false, "a": false} {
		if got := mtls.Authorizes(c, name); got != want {
			t.Errorf("Authorizes(%q) = %v, want %v", name, got, want)
		}
	}
	wildcard := certWithURIs(t, mtls.ProviderURI(mtls.AnyProvider).String())
	if !mtls.Authorizes(wildcard, "whatever") || mtls.Authorizes(wildcard, "") {
		t.Fatal("wildcard certificate")
	}
	if mtls.Authorizes(nil, "local") || mtls.Authorizes(&x509.Certificate{}, "local") {
		t.Fatal("a certificate without URI SANs authorizes nothing")
	}
	if got := mtls.ProviderURI("OpenStack").String(); got != "machinist://provider/openstack" {
		t.Fatalf("ProviderURI = %q", got)
	}
}
