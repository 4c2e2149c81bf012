// Package eventnote makes every Event the controllers record fit what the API server accepts.
// events.k8s.io/v1 refuses an event whose note is longer than 1024 bytes or whose reason or
// action is longer than 128 (kubernetes @ v1.36.3, pkg/apis/core/validation/events.go), and
// client-go's recorder drops a refused event for good ("Server rejected event (will not
// retry!)"). A note naming every machine of a large pass went over the limit at a few dozen
// machines, so the MachineSet controller's deletion events were lost whenever they mattered most.
//
// Every recorder of the controllers comes from For, which wraps the manager's recorder in
// Recorder: the note is formatted, made valid UTF-8 and cut to the limit at a character
// boundary (internal/truncate), and the reason and action likewise. List summarises a list of names for a note
// ("a, b, c … and 97 more"), so a long list keeps what follows it.
package eventnote

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	"github.com/machinist-io/machinist/internal/truncate"
)

// The API server's limits for an event (events.k8s.io/v1), in bytes.
const (
	MaxNote   = 1024
	MaxReason = 128
	MaxAction = 128
)

// ListBudget is the share of a note List gives a list by default: half of it, so the words
// around the list always fit.
const ListBudget = MaxNote / 2

// maxListed is how many names a summary shows at most: enough to recognise a pass, few enough
// to read.
const maxListed = 10

// Provider is what hands out event recorders: a controller-runtime manager or cluster.
type Provider interface {
	GetEventRecorder(name string) events.EventRecorder
}

// For returns the recorder named name of p, wrapped in Recorder. Every controller takes its
// recorder from here (a test of this package fails on any other call of GetEventRecorder).
func For(p Provider, name string) events.EventRecorder {
	return Recorder{Next: p.GetEventRecorder(name)}
}

// Recorder records through Next every event cut to the API server's limits.
type Recorder struct {
	Next events.EventRecorder
}

var _ events.EventRecorder = Recorder{}

// Eventf formats the note and records the event with the note, reason and action cut to their
// limits.
func (r Recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	if len(args) > 0 {
		note = fmt.Sprintf(note, args...)
	}
	r.Next.Eventf(regarding, related, eventtype, truncate.String(reason, MaxReason), truncate.String(action, MaxAction), "%s", truncate.String(note, MaxNote))
}

// List joins names with ", " when they fit in budget bytes and are few; otherwise it shows the
// first ones that fit (at most ten, at least one, cut if it alone is too long) and how many
// more there are: "a, b, c … and 97 more".
func List(names []string, budget int) string {
	if joined := strings.Join(names, ", "); len(names) <= maxListed && len(joined) <= budget {
		return joined
	}
	var b strings.Builder
	shown := 0
	for i, name := range names {
		rest := " … and " + strconv.Itoa(len(names)-i) + " more"
		sep := ""
		if i > 0 {
			sep = ", "
		}
		if i == maxListed || (i > 0 && b.Len()+len(sep)+len(name)+len(rest) > budget) {
			break
		}
		if i == 0 && len(name)+len(rest) > budget {
			name = truncate.String(name, max(budget-len(rest), len(truncate.Ellipsis)))
		}
		b.WriteString(sep)
		b.WriteString(name)
		shown++
	}
	if shown < len(names) {
		b.WriteString(" … and " + strconv.Itoa(len(names)-shown) + " more")
	}
	return b.String()
}

// Plural returns "1 machine" or "n machines" for a count and a noun with a regular plural.
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// Broadcaster records events for a process that has no controller-runtime manager (the
// autoscaler server): client-go's broadcaster, its recorders wrapped in Recorder like For's.
type Broadcaster struct {
	b events.EventBroadcaster
}

// NewBroadcaster sends events to sink (an events.k8s.io/v1 client) once started.
func NewBroadcaster(sink events.EventSink) *Broadcaster {
	return &Broadcaster{b: events.NewBroadcaster(sink)}
}

// Recorder returns the recorder that reports as name, wrapped in Recorder.
func (b *Broadcaster) Recorder(scheme *runtime.Scheme, name string) events.EventRecorder {
	return Recorder{Next: b.b.NewRecorder(scheme, name)}
}

// Start sends the recorded events until ctx is done, then shuts the broadcaster down.
func (b *Broadcaster) Start(ctx context.Context) error {
	if err := b.b.StartRecordingToSinkWithContext(ctx); err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		b.b.Shutdown()
	}()
	return nil
}
