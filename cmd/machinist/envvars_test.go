package main

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestFlagEnvVarsAgree: a flag name falls back to the same environment variables in every
// subcommand that has it (none in one and some in another counts as a difference), so one
// variable set for a pod means one thing to every process in it. The hidden old names of
// renamed flags have none by design and are left out.
func TestFlagEnvVarsAgree(t *testing.T) {
	type use struct {
		command string
		envs    []string
	}
	uses := map[string][]use{}
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		for _, c := range cmds {
			for _, f := range c.Flags {
				if v, ok := f.(cli.VisibleFlag); ok && !v.IsVisible() {
					continue
				}
				var envs []string
				if e, ok := f.(interface{ GetEnvVars() []string }); ok {
					envs = e.GetEnvVars()
				}
				name := f.Names()[0]
				uses[name] = append(uses[name], use{prefix + c.Name, envs})
			}
			walk(prefix+c.Name+" ", c.Subcommands)
		}
	}
	app := newApp(io.Discard, io.Discard)
	walk("", app.Commands)
	if len(uses["target-kubeconfig"]) < 3 {
		t.Fatalf("found --target-kubeconfig in %d subcommands; the walk missed them", len(uses["target-kubeconfig"]))
	}
	for name, us := range uses {
		for _, u := range us[1:] {
			if !slices.Equal(u.envs, us[0].envs) {
				t.Errorf("--%s falls back to %v in %s but to %v in %s: give it one environment variable everywhere",
					name, fmtEnvs(us[0].envs), us[0].command, fmtEnvs(u.envs), u.command)
			}
		}
	}
	// Global flags and every subcommand's own flags share one namespace of variables too: no two
	// flag names fall back to the same variable.
	owner := map[string]string{}
	for _, f := range app.Flags {
		if e, ok := f.(interface{ GetEnvVars() []string }); ok {
			for _, env := range e.GetEnvVars() {
				owner[env] = f.Names()[0]
			}
		}
	}
	for name, us := range uses {
		for _, env := range us[0].envs {
			if o, taken := owner[env]; taken && o != name {
				t.Errorf("%s is the variable of --%s and of --%s", env, o, name)
			}
			owner[env] = name
		}
	}
}

func fmtEnvs(envs []string) string {
	if len(envs) == 0 {
		return "none"
	}
	return strings.Join(envs, ",")
}
