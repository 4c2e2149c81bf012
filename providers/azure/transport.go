package azure

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
)

// loginHealth remembers why the last request of a credential set to Microsoft Entra ID got no
// response. MSAL flattens that cause into its error text ("unable to resolve an endpoint"), so
// it is caught on the credential's transport and attached to the failed ARM call by
// loginPolicy: a login that could not reach Entra ID is an outage, not a bad secret.
type loginHealth struct {
	mu    sync.Mutex
	host  string
	cause error
}

func (h *loginHealth) record(host string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.host, h.cause = host, err
}

func (h *loginHealth) last() (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.host, h.cause
}

// watchedTransport is the credential's transport: it records transport failures (no response)
// in h and forgets them once a response arrives.
type watchedTransport struct {
	next policy.Transporter
	h    *loginHealth
}

func (t watchedTransport) Do(req *http.Request) (*http.Response, error) {
	resp, err := t.next.Do(req)
	if err != nil {
		if req.Context().Err() == nil {
			t.h.record(req.URL.Host, err)
		}
		return resp, err
	}
	t.h.record("", nil)
	return resp, nil
}

// loginPolicy turns an authentication failure without a response into loginUnreachableError
// carrying the transport's cause. It runs per call, around the bearer token policy.
type loginPolicy struct{ h *loginHealth }

func (p loginPolicy) Do(req *policy.Request) (*http.Response, error) {
	resp, err := req.Next()
	var af *azidentity.AuthenticationFailedError
	if err != nil && errors.As(err, &af) && af.RawResponse == nil {
		host, cause := p.h.last()
		return resp, &loginUnreachableError{host: host, cause: cause, err: err}
	}
	return resp, err
}

// loginUnreachableError is a login that got no answer from Microsoft Entra ID.
type loginUnreachableError struct {
	host  string
	cause error // nil when the transport saw no failure (another call's login failed)
	err   error
}

func (e *loginUnreachableError) Error() string {
	if e.cause == nil {
		return fmt.Sprintf("cannot reach Microsoft Entra ID: %v", e.err)
	}
	return fmt.Sprintf("cannot reach Microsoft Entra ID at %s: %v", e.host, e.cause)
}

func (e *loginUnreachableError) Unwrap() error { return e.err }

// httpClient is the default transport with caPEM (when set) as the only trusted roots.
func httpClient(caPEM string) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	if caPEM != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(caPEM)) {
			return nil, errors.New("no PEM certificate")
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	return &http.Client{Transport: tr}, nil
}
