package manager

import (
	"log/slog"
	"sync/atomic"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// client-go logs through klog's process-wide logger, which must not be replaced while clients
// run. So klog gets, once at start-up, a sink that forwards to whatever handler the latest
// manager installed (slog.Default() before that): the manager's structured logger then covers
// client-go too, without a data race against clients already running.
var clientGoHandler atomic.Pointer[slog.Handler]

func init() {
	klog.SetLogger(logr.New(&forwardSink{name: "client-go"}))
}

// useClientGoLogger makes client-go log through h.
func useClientGoLogger(h slog.Handler) { clientGoHandler.Store(&h) }

// forwardSink is a logr.LogSink that resolves its target on every call.
type forwardSink struct {
	name   string
	values []any
	depth  int
}

func (s *forwardSink) target() logr.LogSink {
	var h slog.Handler
	if p := clientGoHandler.Load(); p != nil {
		h = *p
	} else {
		h = slog.Default().Handler()
	}
	l := logr.FromSlogHandler(h).WithName(s.name).WithCallDepth(s.depth + 1)
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
	c.name = s.name + "/" + name
	return &c
}

var _ logr.LogSink = (*forwardSink)(nil)
