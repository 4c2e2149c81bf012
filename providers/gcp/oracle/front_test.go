package oracle

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	compute "google.golang.org/api/compute/v1"
	"google.golang.org/api/option"

	"github.com/machinist-io/machinist/providers/gcp/fakegcp"
)

// A Compute client with Google's default endpoint, given the front as its proxy and only the
// front's and the fake's CAs (as Gardener's driver process is given HTTPS_PROXY and
// SSL_CERT_FILE), reaches the fake; the front tunnels to nowhere else.
func TestFrontServesTheFakeUnderGooglesName(t *testing.T) {
	w, err := NewWorld()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	fr, err := newFront(w.Cloud)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fr.Close() })
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(fr.CACert)
	pool.AppendCertsFromPEM(w.Server.CACert)
	proxy, _ := url.Parse(fr.URL)
	base := &http.Client{Transport: &http.Transport{
		Proxy: func(r *http.Request) (*url.URL, error) { // as HTTPS_PROXY: loopback goes direct
			if ip := net.ParseIP(r.URL.Hostname()); ip != nil && ip.IsLoopback() {
				return nil, nil
			}
			return proxy, nil
		},
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, base)
	cfg, err := google.JWTConfigFromJSON(w.Key, compute.CloudPlatformScope)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := compute.NewService(ctx, option.WithHTTPClient(oauth2.NewClient(ctx, cfg.TokenSource(ctx))))
	if err != nil {
		t.Fatal(err)
	}
	if svc.BasePath != "https://compute.googleapis.com/compute/v1/" {
		t.Fatalf("the client's endpoint is %s", svc.BasePath)
	}
	w.Cloud.PutInstance(zone, &compute.Instance{Name: "m-1"})
	list, err := svc.Instances.List(fakegcp.DefaultProject, zone).Context(t.Context()).Do()
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "m-1" {
		t.Fatalf("list through the front: %+v, %v", list, err)
	}
	if got := w.Cloud.Requests.For(fakegcp.OpListInstances); len(got) != 1 {
		t.Errorf("the fake saw %d list requests", len(got))
	}

	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://example.com/", nil)
	_, err = base.Do(req)
	if err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("a tunnel to example.com: %v, want the front's refusal", err)
	}
}
