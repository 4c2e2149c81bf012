package pki_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/internal/pki"
)

func mustCA(t *testing.T) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA("test-ca", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func parse(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("not PEM")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestIssuedLeafVerifiesAgainstItsCA(t *testing.T) {
	ca := mustCA(t)
	u, _ := url.Parse("machinist://provider/openstack")
	certPEM, keyPEM, err := ca.Issue(pki.Leaf{
		CommonName: "server", Organization: []string{"system:masters"},
		DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, URIs: []*url.URL{u},
		Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatalf("certificate and key do not pair: %v", err)
	}
	leaf := parse(t, certPEM)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "localhost", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("leaf does not verify as a server for localhost: %v", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Fatal("a server-only leaf verified for client authentication")
	}
	if leaf.Subject.Organization[0] != "system:masters" || leaf.URIs[0].String() != u.String() || !leaf.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("subject or SANs lost: %+v %v %v", leaf.Subject, leaf.URIs, leaf.IPAddresses)
	}
	if leaf.NotBefore.After(time.Now().Add(-pki.Backdate/2)) || !leaf.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Fatalf("validity %s–%s: want backdated, ending with the CA", leaf.NotBefore, leaf.NotAfter)
	}
}

func TestLeafWithoutUsageServesBothWays(t *testing.T) {
	ca := mustCA(t)
	certPEM, _, err := ca.Issue(pki.Leaf{CommonName: "both", DNSNames: []string{"localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := parse(t, certPEM).Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			t.Errorf("usage %v: %v", u, err)
		}
	}
}

func TestLoadCARoundTripAndSEC1Keys(t *testing.T) {
	ca := mustCA(t)
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := pki.LoadCA(ca.CertPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := loaded.Issue(pki.Leaf{CommonName: "after-restart"})
	if err != nil {
		t.Fatal(err)
	}
	if err := parse(t, certPEM).CheckSignatureFrom(ca.Cert); err != nil {
		t.Fatalf("a leaf of the loaded CA is not signed by the original: %v", err)
	}

	// Control planes made before this package keep their CA key as SEC 1.
	k, err := pki.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.ParseKey(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})); err != nil {
		t.Fatalf("SEC 1 key: %v", err)
	}
}

func TestLoadCARefusesWhatIsNotACA(t *testing.T) {
	ca := mustCA(t)
	leafPEM, leafKey, err := ca.Issue(pki.Leaf{CommonName: "leaf"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.LoadCA(leafPEM, leafKey); err == nil || !strings.Contains(err.Error(), "not a CA") {
		t.Fatalf("LoadCA of a leaf: %v, want a refusal", err)
	}
	if _, err := pki.LoadCA([]byte("junk"), leafKey); err == nil {
		t.Fatal("LoadCA of junk succeeded")
	}
	if _, err := pki.ParseKey(ca.CertPEM); err == nil {
		t.Fatal("ParseKey of a certificate succeeded")
	}
}
