// Command machinist manages cloud machines for Kubernetes. Each subcommand lives in its own
// file and adds itself to commands from init().
//
// Three build tags choose what a binary holds:
//
//   - provider_<name> (repeatable) links in only the named providers; without one, every provider
//     under providers/ is linked in (providers/all).
//
//   - slim leaves out the subcommands that need the controllers, controller-runtime or the
//     autoscaler server (run, autoscaler, dev, controlplane, fakecloud: their files start with
//     //go:build !slim). A slim binary keeps what a provider process needs: serve, connect,
//     driver, providers and version.
//
//   - machinecontroller, with slim, adds back what MCM's machine-controller needs: `run` and the
//     subcommands machine-controller-manager and machine-controller (halves.go), so the
//     controllers and controller-runtime, but still not the autoscaler server, the control
//     plane or the fake clouds. A link to the binary named machine-controller[-<provider>] or
//     machine-controller-manager runs that subcommand.
//
// `make build` writes bin/machinist (no tags: every subcommand and provider), its link
// bin/machine-controller-manager, and, per provider, bin/machinist-<name> (-tags
// slim,provider_<name>) and bin/machine-controller-<name> (-tags
// slim,machinecontroller,provider_<name>, the provider image's /machine-controller). `go build
// -tags provider_openstack` without slim is a full binary with one provider. `make check-slim`
// proves what each slim build links.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/internal/logbridge"
	"github.com/machinist-io/machinist/internal/version"
	_ "github.com/machinist-io/machinist/providers/all"
)

// commands is filled by the init() of each subcommand's file.
var commands []*cli.Command

// argRewrites change the command line before it is parsed (explain.go: kubectl's flags after
// the arguments).
var argRewrites []func(args []string) []string

// entrypointOf names the subcommand a program name stands for ("" for none): set by halves.go,
// so a link to this binary named after one of MCM's programs runs as that program. Nil in
// builds without the controllers.
var entrypointOf func(program string) string

// entrypointArgs returns args to run: args itself, or, when args[0] names one of MCM's programs
// (entrypointOf), args with that program's subcommand inserted after it.
func entrypointArgs(args []string) []string {
	if entrypointOf == nil || len(args) == 0 {
		return args
	}
	sub := entrypointOf(filepath.Base(args[0]))
	if sub == "" {
		return args
	}
	return append([]string{args[0], sub}, args[1:]...)
}

func init() {
	// -v is the verbosity flag here, so --version keeps no short alias.
	cli.VersionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version"}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	args := entrypointArgs(os.Args)
	for _, rewrite := range argRewrites {
		args = rewrite(args)
	}
	err := newApp(os.Stdout, os.Stderr).RunContext(ctx, args)
	stop()
	if err != nil {
		fmt.Fprint(os.Stderr, describeError(err))
		os.Exit(exitCode(err))
	}
}

// exitCode is 1 for a failure, or the code a command chose (cli.Exit: plan's "would be
// blocked").
func exitCode(err error) int {
	var coder cli.ExitCoder
	if errors.As(err, &coder) && coder.ExitCode() != 0 {
		return coder.ExitCode()
	}
	return 1
}

// newApp builds the CLI writing to stdout and stderr.
func newApp(stdout, stderr io.Writer) *cli.App {
	cmds := append([]*cli.Command(nil), commands...)
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].Name < cmds[j].Name })
	return &cli.App{
		Name:    "machinist",
		Usage:   "manage cloud machines for Kubernetes (Gardener MCM compatible)",
		Version: version.String(),
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "v", Usage: "log verbosity: 0 info, 1 or more debug", EnvVars: []string{"MACHINIST_V"}},
			&cli.StringFlag{Name: "log-format", Value: "text", Usage: "log format: text or json", EnvVars: []string{"MACHINIST_LOG_FORMAT"}},
		},
		Before: func(c *cli.Context) error {
			return setupLogging(stderr, c.Int("v"), c.String("log-format"))
		},
		Commands:             cmds,
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: true,
		// main prints errors itself, with the code and what to do.
		ExitErrHandler: func(*cli.Context, error) {},
	}
}

// setupLogging makes slog's default logger write to w at the chosen verbosity and format, and
// routes the libraries' own loggers there too: klog (client-go) here, controller-runtime in
// logging_full.go (not in slim builds).
func setupLogging(w io.Writer, v int, format string) error {
	level := slog.LevelInfo
	if v > 0 {
		level = slog.LevelDebug
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch strings.ToLower(format) {
	case "text", "":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return fmt.Errorf("--log-format %q: use text or json", format)
	}
	slog.SetDefault(slog.New(h))
	logbridge.Use(h)
	return nil
}

// describeError renders an error for a person: for a driver status, its code, message and what
// to do about it.
func describeError(err error) string {
	var st *driver.Status
	if !errors.As(err, &st) {
		return "machinist: " + err.Error() + "\n"
	}
	s := driver.StatusOf(err)
	var b strings.Builder
	fmt.Fprintf(&b, "machinist: %s: %s\n", s.Code(), s.Message())
	if hint := codeHints[s.Code()]; hint != "" {
		fmt.Fprintf(&b, "what to do: %s\n", hint)
	}
	return b.String()
}

// codeHints says what to do about each machine code.
var codeHints = map[driver.Code]string{
	driver.Canceled:           "the operation was cancelled before it finished; run it again",
	driver.Unknown:            "the provider gave no classification; retry, and if it persists read the message above",
	driver.InvalidArgument:    "fix the MachineClass field (or machine/secret input) named above; retrying unchanged will not help",
	driver.DeadlineExceeded:   "the operation timed out and may still complete; check with `machinist driver status`, or retry with a longer --timeout",
	driver.NotFound:           "there is no VM for this machine: check --machine and the class, or create it first",
	driver.AlreadyExists:      "a VM of this name exists but does not match the request: delete it or choose another machine name",
	driver.PermissionDenied:   "grant the credentials in the secret the permission named above",
	driver.ResourceExhausted:  "quota or capacity is exhausted: raise the quota or free capacity, then retry later",
	driver.FailedPrecondition: "fix the state named above first, then retry",
	driver.Aborted:            "a concurrent operation conflicted; retry",
	driver.OutOfRange:         "several VMs match this machine, or a size is out of range: clean up the duplicates or fix the size",
	driver.Unimplemented:      "this provider does not support the operation",
	driver.Internal:           "the provider hit a broken invariant: report it with the message above",
	driver.Unavailable:        "the cloud (or driver server) is unreachable for now; retry with backoff",
	driver.DataLoss:           "unrecoverable data loss in the provider: report it with the message above",
	driver.Unauthenticated:    "the credentials in the secret are missing or invalid: fix the secret (--secret)",
	driver.Uninitialized:      "the VM exists but is not initialized yet; retry shortly",
}
