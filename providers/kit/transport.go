package kit

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"sync"
)

// TLS are the TLS settings a secret may hold for its cloud's endpoints.
type TLS struct {
	// CACert holds the PEM certificates of the CAs that sign the endpoints; when set they are the
	// only roots trusted.
	CACert string
	// Insecure skips the verification of the endpoints' certificates (the user asked for it).
	Insecure bool
	// ClientCert and ClientKey are a PEM client certificate and its key, both or neither.
	ClientCert, ClientKey string
}

// Errors of Transport, so a provider names the secret key they are about.
var (
	ErrNoPEMCertificate = errors.New("holds no PEM certificate")
	ErrClientKeyPair    = errors.New("are not a PEM certificate and its key")
)

// Transport is a clone of http.DefaultTransport (proxy from the environment, connection pool,
// HTTP/2) that speaks TLS 1.2 or later with t's settings.
func Transport(t TLS) (*http.Transport, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.Insecure} //nolint:gosec // only when the secret asks for it.
	if t.CACert != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(t.CACert)) {
			return nil, ErrNoPEMCertificate
		}
		cfg.RootCAs = pool
	}
	if t.ClientCert != "" || t.ClientKey != "" {
		pair, err := tls.X509KeyPair([]byte(t.ClientCert), []byte(t.ClientKey))
		if err != nil {
			return nil, ErrClientKeyPair
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return tr, nil
}

// Transport is the transport of a credential set: HTTPTransport when set, else Transport(t).
func (o Options) Transport(t TLS) (http.RoundTripper, error) {
	if o.HTTPTransport != nil {
		return o.HTTPTransport, nil
	}
	return Transport(t)
}

// UntrustedCertificate reports whether err is (or was caused by) a TLS certificate that does not
// verify: a configuration problem (the secret's CA bundle), not an outage.
func UntrustedCertificate(err error) bool {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var host x509.HostnameError
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &host)
}

// Reach remembers why the last request of a credential set to its token endpoint got no
// response. The clouds' token libraries (MSAL, oauth2) flatten that cause into their error text,
// so it is caught on the token client's transport (Watch) and attached to the failed call by the
// provider: a token endpoint that could not be reached is an outage, not a bad secret.
type Reach struct {
	mu    sync.Mutex
	host  string
	cause error
}

// Last is the host of the last request that got no response and why, or "" and nil when the
// last one got a response.
func (r *Reach) Last() (host string, cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.host, r.cause
}

func (r *Reach) record(host string, cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.host, r.cause = host, cause
}

// Watch wraps the token client's transport: a request that gets no response (while its caller
// still waits) is recorded, a response forgets it.
func (r *Reach) Watch(next http.RoundTripper) http.RoundTripper {
	return watched{next: next, r: r}
}

type watched struct {
	next http.RoundTripper
	r    *Reach
}

func (w watched) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := w.next.RoundTrip(req)
	if err != nil {
		if req.Context().Err() == nil {
			w.r.record(req.URL.Host, err)
		}
		return resp, err
	}
	w.r.record("", nil)
	return resp, nil
}

var _ http.RoundTripper = watched{}
