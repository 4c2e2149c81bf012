package fakegcp

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"

	"github.com/machinist-io/machinist/providers/kit/fakekit"
)

// ComputePath is where the Compute API is served, relative to the server's URL.
const ComputePath = "compute/v1/"

// ComputeEndpoint is the base URL of the Compute API (the client's endpoint option) of a fake
// served at root (fakekit.Server.URL).
func ComputeEndpoint(root string) string { return root + "/" + ComputePath }

// TokenURL is the OAuth 2.0 token endpoint (a service account key's token_uri) of a fake served
// at root.
func TokenURL(root string) string { return root + "/" + TokenPath }

// STSURL is the token exchange endpoint (workload identity's token_url) of a fake served at root.
func STSURL(root string) string { return root + "/" + STSPath }

// ImpersonationURL is the generateAccessToken URL of a service account of a fake served at root.
func ImpersonationURL(root, email string) string {
	return root + "/" + IAMCredentialsPath + "projects/-/serviceAccounts/" + email + ":generateAccessToken"
}

// Serve serves c over HTTPS with a certificate of a CA of its own (fakekit.ServeTLS) on l until
// the server is closed: the Compute API under ComputePath, the token endpoints (TokenPath,
// STSPath, IAMCredentialsPath) and the control requests, at one URL. wrap, when set, wraps the
// handler (to observe requests).
func (c *Cloud) Serve(l net.Listener, wrap func(http.Handler) http.Handler) (*fakekit.Server, error) {
	var h http.Handler = c
	if wrap != nil {
		h = wrap(h)
	}
	return fakekit.ServeTLS("fakegcp", l, h)
}

// ServeHTTP answers one request and records it.
func (c *Cloud) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/")
	if fakekit.Serves(r) {
		c.control().ServeHTTP(w, r)
		return
	}
	start := c.st.clock.Now()
	op := opUnknownEndpoint
	var status int
	var body []byte // of a Compute request (token requests carry credentials: not kept)
	tokenFault := func(op string) *APIError {
		e, _, _ := takeFaults(&c.Faults, op)
		return e
	}
	switch {
	case path == TokenPath || path == STSPath || strings.HasPrefix(path, IAMCredentialsPath):
		op = OpToken
		if path == STSPath {
			op = OpSTSToken
		} else if path != TokenPath {
			op = OpGenerateToken
		}
		if e := tokenFault(op); e != nil {
			status = oauthError(w, e.Status, e.Reason, e.Message)
			break
		}
		switch op {
		case OpToken:
			status = c.auth.serveToken(w, r)
		case OpSTSToken:
			status = c.auth.serveSTS(w, r)
		default:
			status = c.auth.serveGenerateAccessToken(w, r, path)
		}
	case strings.HasPrefix(path, ComputePath):
		var err error
		if body, err = readBody(r); err != nil {
			status = writeError(w, apiErr(http.StatusBadRequest, "parseError", "the request body cannot be read: %v", err))
			break
		}
		op, status = c.compute.serveComputeChecked(w, r, strings.TrimPrefix(path, ComputePath), body)
	default:
		status = writeError(w, apiErr(http.StatusNotFound, "notFound", "fakegcp does not serve %s", r.URL.Path))
	}
	c.Requests.Add(Request{Time: start, Method: r.Method, Path: r.URL.Path, Op: op, Status: status, Query: r.URL.RawQuery, Body: body})
}

// control answers the control requests (fakekit.Control).
func (c *Cloud) control() *fakekit.Control[Fault, Request] {
	return &fakekit.Control[Fault, Request]{
		Name: "fakegcp", State: func() any { return c.State() }, Faults: &c.Faults, Requests: &c.Requests,
		Check: func(f Fault) error {
			switch {
			case f.Err == nil && f.OpErr == nil && f.Delay <= 0:
				return fmt.Errorf("the fault sets none of Err, OpErr and Delay")
			case f.Err != nil && f.Err.Status < 400:
				return fmt.Errorf("Err.Status must be an HTTP error status")
			}
			return nil
		},
		Example: fmt.Sprintf(`{"op":%q,"times":1,"OpErr":{"Code":"ZONE_RESOURCE_POOL_EXHAUSTED"}}`, OpInsertInstance),
	}
}

// serveComputeChecked answers a Compute API request: the method it calls (by the contract when
// the fake has one), the caller's token, the request against the contract, then the answer,
// which is checked against the contract before it is sent.
func (c *computeAPI) serveComputeChecked(w http.ResponseWriter, r *http.Request, path string, body []byte) (op string, status int) {
	c.mu.Lock()
	ct := c.contract
	c.mu.Unlock()
	rt, served := routeOf(r.Method, path)
	var m *contractMethod
	var pathValues map[string]string
	if ct != nil {
		m, pathValues = ct.method(r.Method, path)
		if m == nil {
			return opUnknownEndpoint, writeError(w, apiErr(http.StatusNotFound, "notFound", "The requested URL %s was not found on this server (no method of the Compute API).", r.URL.Path))
		}
		if served && m.ID != rt.op {
			return rt.op, c.violated(w, fmt.Sprintf("%s %s is %s in the discovery document, the fake routes it as %s", r.Method, r.URL.Path, m.ID, rt.op))
		}
	}
	if !served {
		return opUnknownEndpoint, writeError(w, apiErr(http.StatusNotFound, "notFound", "fakegcp does not serve %s %s", r.Method, r.URL.Path))
	}
	if _, e := c.principalOf(r); e != nil {
		return rt.op, writeError(w, e)
	}
	if m == nil {
		return rt.op, c.serveCompute(w, r, rt)
	}
	if e := ct.checkRequest(m, pathValues, r.URL.Query(), body); e != nil {
		return rt.op, writeError(w, e)
	}
	buf := &bufferedAnswer{header: http.Header{}}
	status = c.serveCompute(buf, r, rt)
	if status == http.StatusOK {
		if problem := ct.checkAnswer(m, buf.body.Bytes()); problem != "" {
			return rt.op, c.violated(w, problem)
		}
	}
	maps.Copy(w.Header(), buf.header)
	w.WriteHeader(status)
	_, _ = w.Write(buf.body.Bytes())
	return rt.op, status
}

// maxBody bounds the body of a Compute request (an instance with 256 KiB of user data fits).
const maxBody = 4 << 20

// readBody reads a request's body and puts it back for the handler.
func readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxBody {
		return nil, fmt.Errorf("the body is larger than %d bytes", maxBody)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if len(body) == 0 {
		return nil, nil
	}
	return body, nil
}

// violated records an answer that broke the contract and answers 500 instead.
func (c *state) violated(w http.ResponseWriter, problem string) int {
	c.mu.Lock()
	c.violations = append(c.violations, problem)
	c.mu.Unlock()
	return writeError(w, apiErr(http.StatusInternalServerError, "fakegcpContract", "fakegcp broke the Compute contract: %s", problem))
}

// bufferedAnswer holds an answer until it is checked.
type bufferedAnswer struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedAnswer) Header() http.Header         { return b.header }
func (b *bufferedAnswer) Write(p []byte) (int, error) { return b.body.Write(p) }
func (b *bufferedAnswer) WriteHeader(status int)      { b.status = status }

var _ http.ResponseWriter = (*bufferedAnswer)(nil)
