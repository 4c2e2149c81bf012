package gcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/oauth2"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/machinist-io/machinist/providers/kit"
)

// tokenTransport authorizes each request with the credential set's access token. It does what
// oauth2.Transport does, but a failure to get a token comes back as a *tokenError (oauth2's
// own flattens the cause into text), and the caller's context ends the wait for a token request
// in flight.
type tokenTransport struct {
	source oauth2.TokenSource
	next   http.RoundTripper
	reach  *kit.Reach // of the token endpoint
}

func (t tokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	type result struct {
		tok *oauth2.Token
		err error
	}
	ch := make(chan result, 1)
	go func() {
		tok, err := t.source.Token()
		ch <- result{tok, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if r.err != nil {
		host, cause := t.reach.Last()
		return nil, &tokenError{err: r.err, host: host, cause: cause}
	}
	out := req.Clone(ctx)
	r.tok.SetAuthHeader(out)
	return t.next.RoundTrip(out)
}

// tokenError is a failure to get an access token.
type tokenError struct {
	err   error
	host  string // the token endpoint that gave no answer, when one did not
	cause error  // why it gave none
}

func (e *tokenError) Error() string {
	if e.cause != nil {
		return fmt.Sprintf("cannot reach the token endpoint %s: %v", e.host, e.cause)
	}
	return e.err.Error()
}

func (e *tokenError) Unwrap() error { return e.err }

// retryTransport retries what Compute Engine asks to retry later: rate limits
// (rateLimitExceeded, userRateLimitExceeded, HTTP 429) and server errors (5xx), with
// exponential backoff (or the answer's Retry-After, when longer) up to backoff.Steps retries.
// Every request is safe to repeat: reads and deletes are idempotent and inserts carry a
// requestId, which Compute Engine deduplicates.
type retryTransport struct {
	next    http.RoundTripper
	backoff wait.Backoff
	clock   clock.Clock
}

func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	b := t.backoff
	for attempt := 0; ; attempt++ {
		resp, err := t.next.RoundTrip(req)
		if err != nil || attempt >= t.backoff.Steps || !retriable(resp) {
			return resp, err
		}
		if req.Body != nil && req.GetBody == nil {
			return resp, nil // the body cannot be sent again
		}
		delay := b.Step()
		if ra := retryAfter(resp); ra > delay && ra <= b.Cap {
			delay = ra
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		timer := t.clock.NewTimer(delay)
		select {
		case <-req.Context().Done():
			timer.Stop()
			return nil, req.Context().Err()
		case <-timer.C():
		}
		if req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
	}
}

// retriable reports whether an answer asks to retry later. The body of a 403 is read to tell a
// rate limit from a missing permission, and put back for the caller.
func retriable(resp *http.Response) bool {
	switch {
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented:
		return true
	case resp.StatusCode != http.StatusForbidden:
		return false
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return false
	}
	var parsed struct {
		Error struct {
			Errors []struct {
				Reason string `json:"reason"`
			} `json:"errors"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &parsed) != nil {
		return false
	}
	for _, e := range parsed.Error.Errors {
		if rateLimitReasons[e.Reason] {
			return true
		}
	}
	return false
}

// rateLimitReasons are the error reasons of Compute Engine's API rate limits.
var rateLimitReasons = map[string]bool{"rateLimitExceeded": true, "userRateLimitExceeded": true}

// retryAfter is the answer's Retry-After in seconds, or 0.
func retryAfter(resp *http.Response) time.Duration {
	s, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || s <= 0 {
		return 0
	}
	return time.Duration(s) * time.Second
}

var (
	_ http.RoundTripper = tokenTransport{}
	_ http.RoundTripper = (*retryTransport)(nil)
	_ error             = (*tokenError)(nil)
)
