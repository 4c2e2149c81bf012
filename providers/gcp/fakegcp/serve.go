package fakegcp

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/machinist-io/machinist/internal/fakehttps"
)

// ControlPrefix is the path under which a served fake answers its control requests: GET
// ControlPrefix+"state" dumps what it holds (State), POST ControlPrefix+"faults" injects a Fault
// given as JSON, DELETE ControlPrefix+"faults" clears them.
const ControlPrefix = "/.fakecloud/"

// ComputePath is where the Compute API is served, relative to the server's URL.
const ComputePath = "compute/v1/"

// Server serves a Cloud over HTTPS with a certificate of a CA of its own: the Compute API under
// ComputePath, the token endpoints (TokenPath, STSPath, IAMCredentialsPath) and the control
// requests, at one URL.
type Server struct {
	*fakehttps.Server
}

// ComputeEndpoint is the base URL of the Compute API (the client's endpoint option).
func (s *Server) ComputeEndpoint() string { return s.URL + ComputePath }

// TokenURL is the OAuth 2.0 token endpoint (a service account key's token_uri).
func (s *Server) TokenURL() string { return s.URL + TokenPath }

// STSURL is the token exchange endpoint (workload identity's token_url).
func (s *Server) STSURL() string { return s.URL + STSPath }

// ImpersonationURL is the generateAccessToken URL of a service account.
func (s *Server) ImpersonationURL(email string) string {
	return s.URL + IAMCredentialsPath + "projects/-/serviceAccounts/" + email + ":generateAccessToken"
}

// Serve serves c over HTTPS on l until Close. wrap, when set, wraps the handler (to observe
// requests). The certificate is valid for the listener's address, 127.0.0.1, ::1 and localhost.
func (c *Cloud) Serve(l net.Listener, wrap func(http.Handler) http.Handler) (*Server, error) {
	var h http.Handler = c
	if wrap != nil {
		h = wrap(h)
	}
	srv, err := fakehttps.Serve("fakegcp", l, h)
	if err != nil {
		return nil, err
	}
	return &Server{Server: srv}, nil
}

// ServeHTTP answers one request and records it.
func (c *Cloud) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/")
	if strings.HasPrefix(r.URL.Path, ControlPrefix) {
		c.serveControl(w, r)
		return
	}
	start := c.clock.Now()
	op := opUnknownEndpoint
	var status int
	tokenFault := func(op string) *APIError {
		c.mu.Lock()
		defer c.mu.Unlock()
		e, _, _ := c.faultsFor(op)
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
			status = c.serveToken(w, r)
		case OpSTSToken:
			status = c.serveSTS(w, r)
		default:
			status = c.serveGenerateAccessToken(w, r, path)
		}
	case strings.HasPrefix(path, ComputePath):
		rt, ok := routeOf(r.Method, strings.TrimPrefix(path, ComputePath))
		switch {
		case !ok:
			status = writeError(w, apiErr(http.StatusNotFound, "notFound", "fakegcp does not serve %s %s", r.Method, r.URL.Path))
		default:
			op = rt.op
			if _, e := c.principalOf(r); e != nil {
				status = writeError(w, e)
			} else {
				status = c.serveCompute(w, r, rt)
			}
		}
	default:
		status = writeError(w, apiErr(http.StatusNotFound, "notFound", "fakegcp does not serve %s", r.URL.Path))
	}
	c.mu.Lock()
	c.requests = append(c.requests, Request{Time: start, Method: r.Method, Path: r.URL.Path, Op: op, Status: status, Query: r.URL.RawQuery})
	c.mu.Unlock()
}

func (c *Cloud) serveControl(w http.ResponseWriter, r *http.Request) {
	what := strings.TrimPrefix(r.URL.Path, ControlPrefix)
	switch {
	case what == "state" && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(c.State())
	case what == "faults" && r.Method == http.MethodPost:
		var f Fault
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		err := dec.Decode(&f)
		if err == nil && f.Err == nil && f.OpErr == nil && f.Delay <= 0 {
			err = fmt.Errorf("the fault sets none of Err, OpErr and Delay")
		}
		if err == nil && f.Err != nil && f.Err.Status < 400 {
			err = fmt.Errorf("Err.Status must be an HTTP error status")
		}
		if err != nil {
			http.Error(w, fmt.Sprintf("fakegcp: the body must be a Fault as JSON, e.g. {\"Op\":%q,\"Times\":1,\"OpErr\":{\"Code\":\"ZONE_RESOURCE_POOL_EXHAUSTED\"}}: %v", OpInsertInstance, err), http.StatusBadRequest)
			return
		}
		c.Inject(f)
		w.WriteHeader(http.StatusNoContent)
	case what == "faults" && r.Method == http.MethodDelete:
		c.ClearFaults()
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, "fakegcp: control requests are GET "+ControlPrefix+"state, POST and DELETE "+ControlPrefix+"faults", http.StatusNotFound)
	}
}
