package mtls

import (
	"context"
	"crypto/x509"
	"net/url"
	"sort"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// The certificate convention for provider authorization: a provider's client certificate carries
// one URI SAN per provider name it may serve,
//
//	machinist://provider/<name>     e.g. machinist://provider/openstack
//
// and machinist://provider/* authorizes every name (for an all-in-one provider process). Names
// compare case-insensitively, like MachineClass.provider. Other SANs (DNS names, IPs) are ignored
// for authorization, so the same certificate can also identify the host.
const (
	// ProviderURIScheme and ProviderURIHost form the URI SAN prefix machinist://provider/.
	ProviderURIScheme = "machinist"
	ProviderURIHost   = "provider"
	// AnyProvider is the path segment that authorizes every provider name.
	AnyProvider = "*"
)

// ProviderURI returns the URI SAN that authorizes name (or AnyProvider).
func ProviderURI(name string) *url.URL {
	return &url.URL{Scheme: ProviderURIScheme, Host: ProviderURIHost, Path: "/" + strings.ToLower(name)}
}

// AuthorizedProviders returns the provider names cert authorizes (lower-case, sorted), including
// AnyProvider when present.
func AuthorizedProviders(cert *x509.Certificate) []string {
	if cert == nil {
		return nil
	}
	seen := map[string]bool{}
	for _, u := range cert.URIs {
		if u == nil || !strings.EqualFold(u.Scheme, ProviderURIScheme) || !strings.EqualFold(u.Host, ProviderURIHost) {
			continue
		}
		name := strings.ToLower(strings.TrimPrefix(u.Path, "/"))
		if name == "" || strings.Contains(name, "/") {
			continue
		}
		seen[name] = true
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Authorizes reports whether cert may serve the provider name.
func Authorizes(cert *x509.Certificate, name string) bool {
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "" {
		return false
	}
	for _, n := range AuthorizedProviders(cert) {
		if n == AnyProvider || n == name {
			return true
		}
	}
	return false
}

// PeerCertificate returns the verified client certificate of a gRPC call, or nil when the call
// did not arrive over TLS with a client certificate.
func PeerCertificate(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return info.State.VerifiedChains[0][0]
}

// PeerIdentity describes a call's client for logs: the certificate's subject, or the address.
func PeerIdentity(ctx context.Context) string {
	if c := PeerCertificate(ctx); c != nil {
		if c.Subject.CommonName != "" {
			return "cn=" + c.Subject.CommonName
		}
		return c.Subject.String()
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return "unknown peer"
}
