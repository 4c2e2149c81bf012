//go:build !slim

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// TestLibraryLogsReachTheHandler runs every subcommand with its action replaced by a probe that
// logs through klog (as client-go does) and controller-runtime's logger (as the controllers and
// the autoscaler server do): both lines must come out of machinist's own handler, in the chosen
// format. A logger left unset would drop them, and controller-runtime would print "log.SetLogger
// (...) was never called" with a stack trace 30 s after its first use.
func TestLibraryLogsReachTheHandler(t *testing.T) {
	if len(commands) < 6 {
		t.Fatalf("only %d subcommands registered", len(commands))
	}
	for _, cmd := range commands {
		t.Run(cmd.Name, func(t *testing.T) {
			var stderr bytes.Buffer
			app := newApp(io.Discard, &stderr)
			for i, c := range app.Commands {
				if c.Name != cmd.Name {
					continue
				}
				probe := *c
				probe.Subcommands, probe.Flags = nil, nil
				probe.Before, probe.After = nil, nil
				probe.Action = func(*cli.Context) error {
					klog.InfoS("probe from klog", "subcommand", cmd.Name)
					ctrllog.Log.WithName("probe").Info("probe from controller-runtime", "subcommand", cmd.Name)
					return nil
				}
				app.Commands[i] = &probe
			}
			if err := app.RunContext(context.Background(), []string{"machinist", "--log-format", "json", cmd.Name}); err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			sc := bufio.NewScanner(&stderr)
			for sc.Scan() {
				var line struct{ Msg, Subcommand, Logger string }
				if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
					t.Fatalf("not a JSON log line: %q", sc.Text())
				}
				if line.Subcommand == cmd.Name {
					seen[line.Msg+" ("+line.Logger+")"] = true
				}
			}
			for _, want := range []string{"probe from klog (client-go)", "probe from controller-runtime (probe)"} {
				if !seen[want] {
					t.Errorf("no %q in the handler's output: %v\n%s", want, seen, stderr.String())
				}
			}
			if strings.Contains(stderr.String(), "was never called") {
				t.Errorf("controller-runtime's warning:\n%s", stderr.String())
			}
		})
	}
}
