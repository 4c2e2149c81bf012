package fakeaws

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/machinist-io/machinist/providers/kit/fakekit"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Request is one API request the fake answered, as the recorder keeps it.
type Request struct {
	Action    string    `json:"action"`
	Time      time.Time `json:"time"`
	RequestID string    `json:"requestID"`
	// Code is the error code answered, "" for success.
	Code string `json:"code,omitempty"`
	// Params are the request's parameters as the query protocol sends them, flattened
	// (TagSpecification.1.Tag.2.Key), without Action and Version. Credentials travel in headers
	// and are not among them; STS's WebIdentityToken is replaced by "<token>".
	Params map[string]string `json:"params,omitempty"`
	// Invocation and Attempt are the SDK's amz-sdk-invocation-id and the attempt of its
	// amz-sdk-request header: the attempts of one call share the invocation. A successful
	// answer followed by another attempt of its invocation never reached the client (the SDK
	// retries a connection it lost while reading the answer).
	Invocation string `json:"invocation,omitempty"`
	Attempt    int    `json:"attempt,omitempty"`
}

// Operation is the request's Action.
func (r Request) Operation() string { return r.Action }

// recorded is what the recorder keeps of a request's parameters.
func recorded(p params) map[string]string {
	out := make(map[string]string, len(p))
	for k, v := range p {
		switch k {
		case "Action", "Version":
			continue
		case "WebIdentityToken":
			v = "<token>"
		}
		out[k] = v
	}
	return out
}

// attemptOf reads the attempt of an amz-sdk-request header ("attempt=2; max=3"), 0 without one.
func attemptOf(header string) int {
	for _, part := range strings.Split(header, ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "attempt="); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// Serve serves c over HTTP on l until the server is closed (which releases hung requests first);
// its URL is the endpoint to point EC2 and STS clients at, e.g. http://127.0.0.1:8443. wrap, when
// set, wraps the handler (to observe requests).
func (c *Cloud) Serve(l net.Listener, wrap func(http.Handler) http.Handler) (*fakekit.Server, error) {
	var h http.Handler = c
	if wrap != nil {
		h = wrap(h)
	}
	srv := fakekit.Serve(l, h)
	srv.OnClose(c.Release)
	return srv, nil
}

// ServeHTTP answers EC2 and STS query requests (POST, form-encoded, Action=...) and the control
// requests.
func (c *Cloud) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if fakekit.Serves(r) {
		c.control().ServeHTTP(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/latest/") {
		c.apiSTS.serveIMDS(w, r)
		return
	}
	reqID := newRequestID()
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	form, err := url.ParseQuery(string(body))
	if err != nil || r.Method != http.MethodPost {
		writeEC2Error(w, reqID, badRequest("InvalidQueryParameter", "fakeaws answers form-encoded POST requests of EC2's query protocol"))
		return
	}
	for k, v := range r.URL.Query() {
		form[k] = v
	}
	p := parseParams(form)
	action := p.str("Action")
	isSTS := action == "AssumeRoleWithWebIdentity"

	var answer any
	var apiErr *apiError
	defer func() {
		code := ""
		if apiErr != nil {
			code = apiErr.code
		}
		c.Requests.Add(Request{Action: action, Time: c.st.clock.Now(), RequestID: reqID, Code: code, Params: recorded(p),
			Invocation: r.Header.Get("Amz-Sdk-Invocation-Id"), Attempt: attemptOf(r.Header.Get("Amz-Sdk-Request"))})
	}()

	f, faulty := c.Faults.Take(func(f Fault) bool { return f.Matches(action) })
	if faulty && !f.AfterEffect {
		if !c.st.stall(r.Context(), &f) {
			return
		}
		if f.Code != "" {
			apiErr = errf(f.Status, f.Code, "%s", f.Message)
			writeError(w, isSTS, reqID, apiErr)
			return
		}
	}

	switch {
	case isSTS:
		answer, apiErr = c.apiSTS.assumeRoleWithWebIdentity(p)
	default:
		handler, known := c.actions[action]
		if !known {
			apiErr = badRequest("InvalidAction", "The action %s is not valid for this web service.", action)
			break
		}
		if apiErr = c.apiSTS.authenticate(r, body); apiErr == nil {
			answer, apiErr = handler(p)
		}
	}

	if faulty && f.AfterEffect {
		if !c.st.stall(r.Context(), &f) {
			return
		}
		if f.Code != "" {
			apiErr = errf(f.Status, f.Code, "%s", f.Message)
		}
	}
	if apiErr != nil {
		writeError(w, isSTS, reqID, apiErr)
		return
	}
	setRequestID(answer, reqID)
	out, err := xml.Marshal(answer)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.Header().Set("x-amzn-RequestId", reqID)
	_, _ = w.Write(append([]byte(xml.Header), out...))
}

// stall applies a fault's delay or hang; false when the caller gave up meanwhile.
func (c *state) stall(ctx context.Context, f *Fault) bool {
	var wait <-chan struct{}
	if f.Hang {
		wait = c.hang()
	}
	var timer <-chan time.Time
	if f.Delay > 0 {
		t := c.clock.NewTimer(f.Delay)
		defer t.Stop()
		timer = t.C()
	}
	if wait == nil && timer == nil {
		return true
	}
	select {
	case <-wait:
	case <-timer:
	case <-ctx.Done():
		return false
	}
	return true
}

func writeError(w http.ResponseWriter, sts bool, reqID string, e *apiError) {
	if sts {
		body := stsErrorBody{Type: "Sender", Code: e.code, Message: e.message, RequestID: reqID}
		if e.status >= 500 {
			body.Type = "Receiver"
		}
		out, _ := xml.Marshal(body)
		w.Header().Set("Content-Type", "text/xml")
		w.Header().Set("x-amzn-RequestId", reqID)
		w.WriteHeader(e.status)
		_, _ = w.Write(out)
		return
	}
	writeEC2Error(w, reqID, e)
}

func writeEC2Error(w http.ResponseWriter, reqID string, e *apiError) {
	out, _ := xml.Marshal(ec2ErrorBody{Code: e.code, Message: e.message, RequestID: reqID})
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.Header().Set("x-amzn-RequestId", reqID)
	w.WriteHeader(e.status)
	_, _ = w.Write(append([]byte(xml.Header), out...))
}

// setRequestID fills the requestId element of an EC2 answer.
func setRequestID(answer any, id string) {
	switch a := answer.(type) {
	case *runInstancesResponse:
		a.RequestID = id
	case *describeInstancesResponse:
		a.RequestID = id
	case *terminateInstancesResponse:
		a.RequestID = id
	case *describeImagesResponse:
		a.RequestID = id
	case *describeVolumesResponse:
		a.RequestID = id
	case *describeNetworkInterfacesResponse:
		a.RequestID = id
	case *describeSpotRequestsResponse:
		a.RequestID = id
	case *cancelSpotRequestsResponse:
		a.RequestID = id
	case *assignIpv6Response:
		a.RequestID = id
	case *returnResponse:
		a.RequestID = id
	case *assumeRoleWithWebIdentityResponse:
		a.RequestID = id
	}
}

// authenticate checks the request's Signature Version 4 against the fake's keys: an unknown
// key is AuthFailure, a wrong signature SignatureDoesNotMatch, an expired session key
// RequestExpired.
func (c *stsAPI) authenticate(r *http.Request, body []byte) *apiError {
	auth := r.Header.Get("Authorization")
	rest, found := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !found {
		return errf(http.StatusUnauthorized, "AuthFailure", "AWS was not able to validate the provided access credentials")
	}
	fields := map[string]string{}
	for _, part := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || scope[4] != "aws4_request" {
		return errf(http.StatusUnauthorized, "AuthFailure", "AWS was not able to validate the provided access credentials")
	}
	keyID, region, service := scope[0], scope[2], scope[3]
	c.mu.Lock()
	key := c.keys[keyID]
	now := c.clock.Now()
	c.mu.Unlock()
	if key == nil {
		return errf(http.StatusUnauthorized, "AuthFailure", "AWS was not able to validate the provided access credentials")
	}
	if key.sessionToken != "" {
		if r.Header.Get("X-Amz-Security-Token") != key.sessionToken {
			return errf(http.StatusUnauthorized, "AuthFailure", "AWS was not able to validate the provided session token")
		}
		if now.After(key.expires) {
			return errf(http.StatusBadRequest, "RequestExpired", "Request has expired.")
		}
	}
	if region != c.region {
		return errf(http.StatusUnauthorized, "AuthFailure", "Credential should be scoped to a valid region, not '%s'. ", region)
	}
	signingTime, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return errf(http.StatusBadRequest, "MissingParameter", "The request must contain the header X-Amz-Date")
	}
	// Re-sign the request with only the headers the client signed and compare.
	check, err := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return errf(http.StatusBadRequest, "InvalidParameterValue", "%v", err)
	}
	check.ContentLength = int64(len(body))
	for _, h := range strings.Split(fields["SignedHeaders"], ";") {
		if h == "host" || h == "" {
			continue
		}
		if vs, ok := r.Header[http.CanonicalHeaderKey(h)]; ok {
			check.Header[http.CanonicalHeaderKey(h)] = vs
		}
	}
	check.Header.Del("Authorization")
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: keyID, SecretAccessKey: key.secret, SessionToken: key.sessionToken}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, check, hex.EncodeToString(sum[:]), service, region, signingTime); err != nil {
		return errf(http.StatusInternalServerError, "InternalError", "fakeaws: re-sign: %v", err)
	}
	if signature(check.Header.Get("Authorization")) != fields["Signature"] {
		return errf(http.StatusForbidden, "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method.")
	}
	return nil
}

func signature(auth string) string {
	_, sig, _ := strings.Cut(auth, "Signature=")
	return sig
}

// assumeRoleWithWebIdentity is STS's: a registered role and its token get session keys that
// expire in an hour.
func (c *stsAPI) assumeRoleWithWebIdentity(p params) (any, *apiError) {
	role, token := p.str("RoleArn"), p.str("WebIdentityToken")
	c.mu.Lock()
	defer c.mu.Unlock()
	want, known := c.roles[role]
	switch {
	case !known:
		return nil, errf(http.StatusForbidden, "AccessDenied", "Not authorized to perform sts:AssumeRoleWithWebIdentity")
	case token == "" || token != want:
		return nil, badRequest("InvalidIdentityToken", "Couldn't retrieve verification key from your identity provider, please reference AssumeRoleWithWebIdentity documentation for requirements")
	}
	keyID := fmt.Sprintf("ASIAFAKE%012d", c.seq+1)
	c.seq++
	secret, session := randomHex(20), randomHex(32)
	expires := c.clock.Now().Add(time.Hour)
	c.keys[keyID] = &accessKey{secret: secret, sessionToken: session, expires: expires}
	resp := &assumeRoleWithWebIdentityResponse{Xmlns: "https://sts.amazonaws.com/doc/2011-06-15/"}
	resp.Credentials.AccessKeyID, resp.Credentials.SecretAccessKey, resp.Credentials.SessionToken = keyID, secret, session
	resp.Credentials.Expiration = isoTime(expires)
	resp.AssumedRoleArn = strings.Replace(role, ":role/", ":assumed-role/", 1) + "/" + p.str("RoleSessionName")
	resp.AssumedRoleID = "AROAFAKE:" + p.str("RoleSessionName")
	resp.Subject = "system:serviceaccount:machinist"
	return resp, nil
}

// control answers the control requests (fakekit.Control); clearing the faults releases hung
// requests.
func (c *Cloud) control() *fakekit.Control[Fault, Request] {
	return &fakekit.Control[Fault, Request]{
		Name: "fakeaws", State: func() any { return c.State() }, Faults: &c.Faults, Requests: &c.Requests,
		Clear: c.Release, Example: `{"op":"RunInstances","times":1,"status":503,"code":"RequestLimitExceeded"}`,
	}
}

func newRequestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// serveIMDS answers the instance metadata service's token and security-credentials requests
// (IMDSv2) for the role ServeInstanceProfile names.
func (c *stsAPI) serveIMDS(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	role := c.imdsRole
	c.mu.Unlock()
	const credsPath = "/latest/meta-data/iam/security-credentials/"
	switch {
	case r.URL.Path == "/latest/api/token" && r.Method == http.MethodPut:
		w.Header().Set("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", r.Header.Get("X-Aws-Ec2-Metadata-Token-Ttl-Seconds"))
		_, _ = io.WriteString(w, "fakeaws-imds-token")
		return
	case r.Header.Get("X-Aws-Ec2-Metadata-Token") != "fakeaws-imds-token":
		http.Error(w, "", http.StatusUnauthorized)
		return
	case role == "":
		http.NotFound(w, r)
	case r.URL.Path == credsPath:
		_, _ = io.WriteString(w, role)
	case r.URL.Path == credsPath+role:
		c.mu.Lock()
		keyID := fmt.Sprintf("ASIAFAKEIMDS%08d", c.seq+1)
		c.seq++
		secret, session := randomHex(20), randomHex(32)
		expires := c.clock.Now().Add(6 * time.Hour)
		c.keys[keyID] = &accessKey{secret: secret, sessionToken: session, expires: expires}
		now := c.clock.Now()
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{
			"Code": "Success", "LastUpdated": now.UTC().Format(time.RFC3339), "Type": "AWS-HMAC",
			"AccessKeyId": keyID, "SecretAccessKey": secret, "Token": session, "Expiration": expires.UTC().Format(time.RFC3339),
		})
	default:
		http.NotFound(w, r)
	}
}
