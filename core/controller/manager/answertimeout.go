package manager

import (
	"context"
	"io"
	"net/http"
	"time"

	"k8s.io/client-go/rest"
)

// answerTimeout bounds how long a request waits for the API server's answer once sent. The
// server gives up on a request after its own --request-timeout (60 s by default) and answers
// 504, so a request still unanswered after that will not be answered: an etcd leader change on
// a starved machine left 16 DELETEs of the MachineSet controller unanswered for 15 minutes, and
// the set (and the machines waiting for it) stood still. The request fails and is retried
// instead. Watches and other long-running requests are not bounded.
const answerTimeout = 90 * time.Second

// withAnswerTimeout makes cfg's requests fail after answerTimeout without an answer.
func withAnswerTimeout(cfg *rest.Config) {
	wrap := cfg.WrapTransport
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if wrap != nil {
			rt = wrap(rt)
		}
		return &answerTimeoutTripper{next: rt, timeout: answerTimeout}
	}
}

type answerTimeoutTripper struct {
	next    http.RoundTripper
	timeout time.Duration
}

func (t *answerTimeoutTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if longRunning(req) {
		return t.next.RoundTrip(req)
	}
	ctx, cancel := context.WithTimeout(req.Context(), t.timeout)
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// longRunning reports a watch (the controllers make no other long-running requests: no logs,
// exec or port-forward).
func longRunning(req *http.Request) bool {
	w := req.URL.Query().Get("watch")
	return w == "true" || w == "1"
}

// cancelOnClose releases the request's timer once the caller has read the answer.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
