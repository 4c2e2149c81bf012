package logbridge_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"k8s.io/klog/v2"

	"github.com/machinist-io/machinist/internal/logbridge"
)

func TestForwardsToTheLatestHandler(t *testing.T) {
	var first, second bytes.Buffer
	logbridge.Use(slog.NewTextHandler(&first, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// A logger taken before the second Use follows it: libraries keep theirs for the process.
	lib := logbridge.Logger("lib").WithName("sub").WithValues("k", "v")
	klog.InfoS("from klog", "n", 1)
	logbridge.Use(slog.NewTextHandler(&second, &slog.HandlerOptions{Level: slog.LevelInfo}))
	lib.Info("from lib")
	lib.V(1).Info("debug from lib")
	lib.Error(errors.New("boom"), "failed")
	klog.InfoS("from klog again")

	if got := first.String(); !strings.Contains(got, `msg="from klog"`) || !strings.Contains(got, "logger=client-go") || !strings.Contains(got, "n=1") {
		t.Errorf("first handler got:\n%s", got)
	}
	got := second.String()
	for _, want := range []string{`msg="from lib"`, "logger=lib/sub", "k=v", `msg=failed`, "err=boom", `msg="from klog again"`} {
		if !strings.Contains(got, want) {
			t.Errorf("second handler lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "debug from lib") {
		t.Errorf("V(1) passed an info-level handler:\n%s", got)
	}
	if strings.Contains(first.String(), "from lib") {
		t.Errorf("the first handler got logs after the second Use:\n%s", first.String())
	}
}
