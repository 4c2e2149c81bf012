package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// profiles saves back-to-back CPU profiles of the controller until stopped.
type profiles struct {
	stopping atomic.Bool
	cancel   context.CancelFunc
	done     chan struct{}
}

// profileChunk is the length of one CPU profile.
const profileChunk = 5 * time.Second

func startProfiles(ctx context.Context, dir string, port int, name string) *profiles {
	p := &profiles{done: make(chan struct{})}
	ctx, p.cancel = context.WithCancel(ctx)
	if dir == "" {
		close(p.done)
		return p
	}
	go func() {
		defer close(p.done)
		for i := 0; ctx.Err() == nil && !p.stopping.Load(); i++ {
			path := filepath.Join(dir, fmt.Sprintf("%s-%03d.pprof", name, i))
			if err := fetchProfile(ctx, port, path); err != nil && ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "bench-scale: CPU profile %s: %v\n", path, err)
				return
			}
		}
	}()
	return p
}

// stop lets the profile being taken complete (at most profileChunk: it covers the end of the
// phase, and the controller is not left profiling for a request that went away), then stops.
func (p *profiles) stop() {
	p.stopping.Store(true)
	select {
	case <-p.done:
	case <-time.After(profileChunk + 5*time.Second):
	}
	p.cancel()
	<-p.done
}

func fetchProfile(ctx context.Context, port int, path string) error {
	return fetch(ctx, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", port, int(profileChunk/time.Second)), path)
}

// fetch saves what url answers in path.
func fetch(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}

// loadStats summarises the 1-minute load average sampled during a phase.
type loadStats struct {
	n         int
	sum, peak float64
}

func (l *loadStats) add(v float64) {
	if v < 0 {
		return
	}
	l.n++
	l.sum += v
	l.peak = max(l.peak, v)
}

func (l loadStats) String() string {
	if l.n == 0 {
		return "?"
	}
	return fmt.Sprintf("%.1f (max %.1f)", l.sum/float64(l.n), l.peak)
}

// load1 is the machine's 1-minute load average (-1 when unknown).
func load1() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}
