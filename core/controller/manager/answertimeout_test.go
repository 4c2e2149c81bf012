package manager

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestAnswerTimeout: a request the server never answers fails after the timeout; a watch is not
// bounded; an answered request's body stays readable after the call returns.
func TestAnswerTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hang":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "/watch":
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		default:
			_, _ = io.WriteString(w, "answer")
		}
	}))
	defer srv.Close()
	defer close(release)
	c := &http.Client{Transport: &answerTimeoutTripper{next: http.DefaultTransport, timeout: 200 * time.Millisecond}}
	get := func(ctx context.Context, path string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c.Do(req)
	}

	start := time.Now()
	if _, err := get(context.Background(), "/hang"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an unanswered request: %v, want a deadline error", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the unanswered request failed after %s", took)
	}

	resp, err := get(context.Background(), "/answer")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(body) != "answer" {
		t.Fatalf("answered request: %q, %v", body, err)
	}

	// A watch outlives the timeout: its stream is still open after several timeouts.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err = get(ctx, "/watch?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	read := make(chan error, 1)
	go func() {
		_, err := resp.Body.Read(make([]byte, 1))
		read <- err
	}()
	select {
	case err := <-read:
		t.Fatalf("the watch ended: %v", err)
	case <-time.After(time.Second): // five timeouts: the watch is not bounded
	}
	cancel()
	<-read //nolint:errcheck // waits for the reader to return; how a cancelled watch ends says nothing
}
