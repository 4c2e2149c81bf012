package main

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"

	"github.com/urfave/cli/v2"
)

// renamed is a flag, or the environment variable a flag falls back to, renamed in this release.
// The old name stays one more release: a flag's old name as a hidden alias (accepted, its value
// given to the new name), an old environment variable read when neither the flag nor its new
// variable is set; either is logged once as deprecated. README.md ("Renamed flags") lists them;
// TestRenamedFlags and TestRenamedEnvironment keep every old name working.
type renamed struct {
	old, new string // flag names; old is empty when only the environment variable was renamed
	oldEnv   string // the environment variable new fell back to before, if renamed
}

// warnedRenamed remembers the old names already logged: once per process.
var warnedRenamed sync.Map

// withRenamed adds each old name to cmd (and to those of its subcommands that have the new
// flag) as a hidden flag of the new flag's type, and gives a value set under the old name to the
// new one before the command runs. Setting both names to different values is an error.
func withRenamed(cmd *cli.Command, renames ...renamed) *cli.Command {
	var mine []renamed
	for _, r := range renames {
		if f := flagNamed(cmd.Flags, r.new); f != nil {
			if r.old != "" {
				cmd.Flags = append(cmd.Flags, hiddenAlias(f, r))
			}
			mine = append(mine, r)
		}
	}
	for _, sub := range cmd.Subcommands {
		withRenamed(sub, renames...)
	}
	if len(mine) > 0 {
		before := cmd.Before
		cmd.Before = func(c *cli.Context) error {
			if err := applyRenamed(c, mine); err != nil {
				return err
			}
			if before != nil {
				return before(c)
			}
			return nil
		}
	}
	return cmd
}

func flagNamed(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

// hiddenAlias is a flag named r.old of the same type as f: no default, no environment variable.
func hiddenAlias(f cli.Flag, r renamed) cli.Flag {
	usage := "deprecated: use --" + r.new
	switch f := f.(type) {
	case *cli.StringFlag:
		return &cli.StringFlag{Name: r.old, Usage: usage, Hidden: true, TakesFile: f.TakesFile}
	case *cli.BoolFlag:
		return &cli.BoolFlag{Name: r.old, Usage: usage, Hidden: true}
	}
	panic(fmt.Sprintf("renamed flag --%s: %T is not supported", r.new, f))
}

func applyRenamed(c *cli.Context, renames []renamed) error {
	for _, r := range renames {
		if r.old == "" || !c.IsSet(r.old) {
			continue
		}
		old := fmt.Sprint(c.Value(r.old))
		if c.IsSet(r.new) && !fromEnvOnly(c, r.new) && fmt.Sprint(c.Value(r.new)) != old {
			return fmt.Errorf("--%s is the deprecated name of --%s and both are given with different values: keep --%s only", r.old, r.new, r.new)
		}
		if err := c.Set(r.new, old); err != nil {
			return fmt.Errorf("--%s (deprecated name of --%s): %w", r.old, r.new, err)
		}
		if _, logged := warnedRenamed.LoadOrStore(r.old+">"+r.new, true); !logged {
			slog.Warn(fmt.Sprintf("flag --%s is deprecated and will be removed in the next release: use --%s", r.old, r.new),
				"command", c.Command.Name)
		}
	}
	// After the flags: a flag given under its old name is given, and wins over any variable.
	for _, r := range renames {
		if err := applyRenamedEnv(c, r); err != nil {
			return err
		}
	}
	return nil
}

// applyRenamedEnv gives the value of r's old environment variable to flag r.new when the flag is
// not set otherwise (command line, its own variable). Both variables set to different values is
// an error, as for the flags' two names.
func applyRenamedEnv(c *cli.Context, r renamed) error {
	if r.oldEnv == "" {
		return nil
	}
	old, ok := os.LookupEnv(r.oldEnv)
	if !ok {
		return nil
	}
	newEnv := envOf(c, r.new)
	if v, set := os.LookupEnv(newEnv); set && newEnv != "" && v != old {
		return fmt.Errorf("environment variable %s is the deprecated name of %s and both are set to different values: keep %s only", r.oldEnv, newEnv, newEnv)
	}
	if !c.IsSet(r.new) {
		if err := c.Set(r.new, old); err != nil {
			return fmt.Errorf("environment variable %s (deprecated name of %s, for --%s): %w", r.oldEnv, newEnv, r.new, err)
		}
	}
	if _, logged := warnedRenamed.LoadOrStore("$"+r.oldEnv+">"+newEnv, true); !logged {
		slog.Warn(fmt.Sprintf("environment variable %s is deprecated and will be ignored from the next release: use %s", r.oldEnv, newEnv),
			"command", c.Command.Name, "flag", "--"+r.new)
	}
	return nil
}

// envOf returns the environment variable flag name falls back to ("" for none).
func envOf(c *cli.Context, name string) string {
	if f, ok := flagNamed(c.Command.Flags, name).(interface{ GetEnvVars() []string }); ok && len(f.GetEnvVars()) > 0 {
		return f.GetEnvVars()[0]
	}
	return ""
}

// fromEnvOnly reports whether the value of flag name came from its environment variable, not
// from the command line, so an old name given on the command line wins over it as before.
func fromEnvOnly(c *cli.Context, name string) bool {
	f := flagNamed(c.Command.Flags, name)
	envs, ok := f.(interface{ GetEnvVars() []string })
	if f == nil || !ok || !f.IsSet() {
		return false
	}
	for _, e := range envs.GetEnvVars() {
		v, found := os.LookupEnv(e)
		if !found {
			continue
		}
		if b, isBool := c.Value(name).(bool); isBool {
			pb, err := strconv.ParseBool(v)
			return err == nil && pb == b
		}
		return v == fmt.Sprint(c.Value(name))
	}
	return false
}
