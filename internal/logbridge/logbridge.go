// Package logbridge routes the logs of libraries that log through logr into the process's slog
// handler: klog (so client-go) and, where it is linked, controller-runtime.
//
// Those libraries keep a process-wide logger that must not be replaced while clients run (and
// controller-runtime takes only the first one it is given). So each gets, once, a sink that
// forwards every call to the handler of the latest Use (slog.Default() before the first): a
// later Use, like a controller manager with its own handler, then covers them too, without a
// data race against clients already running.
package logbridge

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

var (
	handler  atomic.Pointer[slog.Handler]
	klogOnce sync.Once
)

// Use makes klog, and every logger of this package, log through h from now on.
func Use(h slog.Handler) {
	handler.Store(&h)
	klogOnce.Do(func() { klog.SetLogger(Logger("client-go")) })
}

// Logger returns a logger named name ("" for none) that logs through the handler of the latest
// Use. Give it to a library's process-wide SetLogger.
func Logger(name string) logr.Logger {
	return logr.New(&forwardSink{name: name})
}

// forwardSink is a logr.LogSink that resolves its target on every call.
type forwardSink struct {
	name   string
	values []any
	depth  int
}

func (s *forwardSink) target() logr.LogSink {
	var h slog.Handler
	if p := handler.Load(); p != nil {
		h = *p
	} else {
		h = slog.Default().Handler()
	}
	l := logr.FromSlogHandler(h).WithCallDepth(s.depth + 1)
	if s.name != "" {
		l = l.WithName(s.name)
	}
	if len(s.values) > 0 {
		l = l.WithValues(s.values...)
	}
	return l.GetSink()
}

func (s *forwardSink) Init(info logr.RuntimeInfo) { s.depth = info.CallDepth }

func (s *forwardSink) Enabled(level int) bool { return s.target().Enabled(level) }

func (s *forwardSink) Info(level int, msg string, kv ...any) { s.target().Info(level, msg, kv...) }

func (s *forwardSink) Error(err error, msg string, kv ...any) { s.target().Error(err, msg, kv...) }

func (s *forwardSink) WithValues(kv ...any) logr.LogSink {
	c := *s
	c.values = append(append([]any(nil), s.values...), kv...)
	return &c
}

func (s *forwardSink) WithName(name string) logr.LogSink {
	c := *s
	if c.name == "" {
		c.name = name
	} else {
		c.name = s.name + "/" + name
	}
	return &c
}

var _ logr.LogSink = (*forwardSink)(nil)
