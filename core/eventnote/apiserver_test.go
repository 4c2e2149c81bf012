package eventnote_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/eventnote"
	"github.com/machinist-io/machinist/harness/localcontrolplane"
	"github.com/machinist-io/machinist/internal/truncate"
)

// fleet is the machine count the events are sized for.
const fleet = 5000

// TestEveryEventKindFitsAt5000Machines: every Eventf call of the controllers (found in the
// source, so a new one is covered without being listed) is recorded through the recorder the
// controllers get (eventnote.For of a controller-runtime manager) against a real API server,
// with each argument of its note as large as a fleet of 5000 machines makes it — a list of 5000
// machine names for a string, 5000 for a number — and a computed reason or action of 200 bytes.
// Each one is stored: none is rejected (the API server refuses a note over 1024 bytes, and
// client-go drops a refused event for good).
func TestEveryEventKindFitsAt5000Machines(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	sites, _ := scanModule(t)
	ctx := context.Background()
	start, cancel := context.WithTimeout(ctx, 5*time.Minute)
	cp, err := localcontrolplane.Start(start, localcontrolplane.Options{Log: slog.New(slog.DiscardHandler)})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	c, err := client.New(cp.Config, client.Options{Scheme: localcontrolplane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cp.Config)
	ns := "events"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(cp.Config, manager.Options{
		Scheme: localcontrolplane.Scheme, Logger: logr.Discard(),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	rec := eventnote.For(mgr, "eventnote-test")

	machines := make([]string, fleet)
	for i := range machines {
		machines[i] = fmt.Sprintf("pool-7d9f4-%05d", i)
	}
	list := strings.Join(machines, ", ")
	longWord := strings.Repeat("Computed", 25) // 200 bytes

	type want struct{ site, reason string }
	wants := map[string]want{} // by the regarding object's name
	for i, s := range sites {
		// One object per site: events of different sites never merge into one series.
		obj := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("site-%03d", i)}, Spec: v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: "c"}}}
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		eventtype := s.eventtype
		if eventtype == "" {
			eventtype = corev1.EventTypeWarning
		}
		reason, action := s.reason, s.action
		if reason == "" {
			reason = longWord
		}
		if action == "" {
			action = longWord
		}
		format, args := s.format, fillVerbs(s.format, list)
		if format == "" {
			format, args = "%s", []any{list}
		}
		if raw := fmt.Sprintf(format, args...); len(raw) <= eventnote.MaxNote && slices.Contains(args, any(list)) {
			t.Fatalf("%s: a note with arguments of 5000 machines is only %d bytes; the test would prove nothing", s.pos, len(raw))
		}
		rec.Eventf(obj, nil, eventtype, reason, action, format, args...)
		wants[obj.Name] = want{s.pos, truncate.String(reason, eventnote.MaxReason)}
	}

	var missing []string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := cs.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		got := map[string]bool{}
		for _, ev := range evs.Items {
			w, ok := wants[ev.Regarding.Name]
			if !ok || ev.Reason != w.reason {
				continue
			}
			if len(ev.Note) > eventnote.MaxNote || !utf8.ValidString(ev.Note) {
				return false, fmt.Errorf("%s: stored a note of %d bytes, valid UTF-8 %v", w.site, len(ev.Note), utf8.ValidString(ev.Note))
			}
			got[ev.Regarding.Name] = true
		}
		missing = missing[:0]
		for name, w := range wants {
			if !got[name] {
				missing = append(missing, w.site+" ("+w.reason+")")
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		t.Fatalf("%v; events never stored (rejected by the API server?): %s", err, strings.Join(missing, "; "))
	}
	t.Logf("%d event call sites, each stored with notes of 5000 machines", len(sites))
}

// fillVerbs returns an argument for each verb of format: 5000 for a number, list otherwise.
func fillVerbs(format, list string) []any {
	var args []any
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		i++
		for i < len(format) && strings.IndexByte("+-# 0123456789.", format[i]) >= 0 {
			i++
		}
		if i >= len(format) || format[i] == '%' {
			continue
		}
		switch format[i] {
		case 'd':
			args = append(args, fleet)
		case 'f', 'g', 'e':
			args = append(args, float64(fleet))
		case 't':
			args = append(args, true)
		default:
			args = append(args, list)
		}
	}
	return args
}
