//go:build !slim

package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/machinist-io/machinist/core/controller/manager"
)

// renamedCases are every renamed flag with the command that has it: old names must keep working
// for one release.
type renamedCase struct {
	cmd     func() *cli.Command
	path    []string // command and subcommand names
	extra   []string // flags the command requires
	renames []renamed
}

func renamedCases() []renamedCase {
	return []renamedCase{
		{runCommand, []string{"run"}, nil, runRenamed},
		{func() *cli.Command { return halfCommand(manager.CoreHalf) }, []string{"machine-controller-manager"}, nil, runRenamed},
		{func() *cli.Command { return halfCommand(manager.ProviderHalf) }, []string{"machine-controller"}, nil, runRenamed},
		{autoscalerCommand, []string{"autoscaler"}, nil, autoscalerRenamed},
		{serveCommand, []string{"serve"}, []string{"--listen=unix:///tmp/x.sock"}, []renamed{targetRenamed}},
		{connectCommand, []string{"connect"}, nil, []renamed{targetRenamed}},
		{driverCommand, []string{"driver", "list"}, nil, []renamed{targetRenamed}},
	}
}

// capture runs cmd with args, its action replaced by one that records the flags' values.
func capture(t *testing.T, cmd *cli.Command, path []string, args ...string) (map[string]string, error) {
	t.Helper()
	got := map[string]string{}
	record := func(c *cli.Context) error {
		for _, f := range c.Command.Flags {
			if n := f.Names()[0]; c.IsSet(n) {
				got[n] = fmt.Sprint(c.Value(n))
			}
		}
		return nil
	}
	leafOf(cmd, path).Action = record
	app := &cli.App{Name: "machinist", Commands: []*cli.Command{cmd}, Writer: io.Discard, ErrWriter: io.Discard,
		ExitErrHandler: func(*cli.Context, error) {}}
	err := app.Run(append(append([]string{"machinist"}, path...), args...))
	return got, err
}

func flagArg(name, value string) string {
	if value == "true" {
		return "--" + name
	}
	return "--" + name + "=" + value
}

// TestRenamedFlags: each old name is accepted, gives its value to the new name, is hidden from
// the help, is logged once as deprecated, conflicts with a different value under the new name,
// and is documented in README.md.
func TestRenamedFlags(t *testing.T) {
	var logs bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range renamedCases() {
		for _, r := range tc.renames {
			if r.old == "" {
				continue // only the environment variable was renamed (TestRenamedEnvironment)
			}
			name := strings.Join(tc.path, " ") + " --" + r.old
			t.Run(name, func(t *testing.T) {
				warnedRenamed.Clear()
				logs.Reset()
				value := "/tmp/x"
				if _, isBool := flagNamed(leafOf(tc.cmd(), tc.path).Flags, r.new).(*cli.BoolFlag); isBool {
					value = "true"
				}
				for range 2 {
					got, err := capture(t, tc.cmd(), tc.path, append([]string{flagArg(r.old, value)}, tc.extra...)...)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if got[r.new] != value {
						t.Fatalf("%s %s: --%s = %q, want %q", name, value, r.new, got[r.new], value)
					}
				}
				if n := strings.Count(logs.String(), "flag --"+r.old+" is deprecated"); n != 1 {
					t.Errorf("deprecation logged %d times, want once:\n%s", n, logs.String())
				}
				if value != "true" {
					_, err := capture(t, tc.cmd(), tc.path, append([]string{flagArg(r.old, value), flagArg(r.new, "/tmp/other")}, tc.extra...)...)
					if err == nil || !strings.Contains(err.Error(), "keep --"+r.new+" only") {
						t.Errorf("both names with different values: %v, want an error", err)
					}
					if _, err := capture(t, tc.cmd(), tc.path, append([]string{flagArg(r.old, value), flagArg(r.new, value)}, tc.extra...)...); err != nil {
						t.Errorf("both names with the same value: %v", err)
					}
				}
				if f := flagNamed(leafOf(tc.cmd(), tc.path).Flags, r.old); f == nil {
					t.Errorf("--%s is not a flag of %s", r.old, name)
				} else if v, ok := f.(cli.VisibleFlag); !ok || v.IsVisible() {
					t.Errorf("--%s is shown in the help", r.old)
				}
				if !strings.Contains(string(readme), "`--"+r.old+"` | `--"+r.new+"`") {
					t.Errorf("README.md's renamed flags do not list `--%s` | `--%s`", r.old, r.new)
				}
			})
		}
	}
}

// TestRenamedFlagWinsOverTheNewNamesEnvironment: an old name on the command line wins over the
// new name's environment variable, as the old name did when it was the flag.
func TestRenamedFlagWinsOverTheNewNamesEnvironment(t *testing.T) {
	t.Setenv("CONTROL_KUBECONFIG", "/from/env")
	got, err := capture(t, autoscalerCommand(), []string{"autoscaler"}, "--kubeconfig=/from/flag")
	if err != nil {
		t.Fatal(err)
	}
	if got["control-kubeconfig"] != "/from/flag" {
		t.Fatalf("--control-kubeconfig = %q, want the old flag's /from/flag", got["control-kubeconfig"])
	}
}

func leafOf(cmd *cli.Command, path []string) *cli.Command {
	for _, name := range path[1:] {
		for _, sub := range cmd.Subcommands {
			if sub.Name == name {
				cmd = sub
			}
		}
	}
	return cmd
}

// TestRenamedEnvironment: each renamed environment variable still sets its flag when neither the
// flag nor the new variable is set, is logged once as deprecated, loses to the command line,
// conflicts with the new variable set to another value, and is documented in README.md.
func TestRenamedEnvironment(t *testing.T) {
	var logs bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, tc := range renamedCases() {
		for _, r := range tc.renames {
			if r.oldEnv == "" {
				continue
			}
			seen++
			leaf := leafOf(tc.cmd(), tc.path)
			newEnv := flagNamed(leaf.Flags, r.new).(interface{ GetEnvVars() []string }).GetEnvVars()[0]
			name := strings.Join(tc.path, " ") + " $" + r.oldEnv
			t.Run(name, func(t *testing.T) {
				warnedRenamed.Clear()
				logs.Reset()
				t.Setenv(r.oldEnv, "/from/old-env")
				t.Setenv(newEnv, "") // restored when the test ends, unset meanwhile
				os.Unsetenv(newEnv)
				for range 2 {
					got, err := capture(t, tc.cmd(), tc.path, tc.extra...)
					if err != nil {
						t.Fatal(err)
					}
					if got[r.new] != "/from/old-env" {
						t.Fatalf("--%s = %q, want the old variable's value", r.new, got[r.new])
					}
				}
				if n := strings.Count(logs.String(), "environment variable "+r.oldEnv+" is deprecated"); n != 1 {
					t.Errorf("deprecation logged %d times, want once:\n%s", n, logs.String())
				}
				if got, err := capture(t, tc.cmd(), tc.path, append([]string{flagArg(r.new, "/from/flag")}, tc.extra...)...); err != nil || got[r.new] != "/from/flag" {
					t.Errorf("the command line does not win over the old variable: %q, %v", got[r.new], err)
				}
				t.Setenv(newEnv, "/from/old-env")
				if got, err := capture(t, tc.cmd(), tc.path, tc.extra...); err != nil || got[r.new] != "/from/old-env" {
					t.Errorf("both variables with the same value: %q, %v", got[r.new], err)
				}
				t.Setenv(newEnv, "/from/new-env")
				if _, err := capture(t, tc.cmd(), tc.path, tc.extra...); err == nil || !strings.Contains(err.Error(), "keep "+newEnv+" only") {
					t.Errorf("both variables with different values: %v, want an error", err)
				}
				if !strings.Contains(string(readme), "`"+r.oldEnv+"` | `"+newEnv+"`") {
					t.Errorf("README.md's renamed environment variables do not list `%s` | `%s`", r.oldEnv, newEnv)
				}
			})
		}
	}
	if seen < 6 {
		t.Fatalf("%d renamed environment variables checked, want the 6 of serve, connect, driver and autoscaler", seen)
	}
}
