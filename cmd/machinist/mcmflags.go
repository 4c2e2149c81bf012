//go:build !slim || machinecontroller

package main

import (
	"fmt"
	"log/slog"
	"runtime"
	"slices"

	"github.com/urfave/cli/v2"

	"github.com/machinist-io/machinist/core/controller/manager"
)

// MCM's command lines, accepted by `machinist run` and the halves (halves.go). Every flag MCM's
// two programs define is a flag of these commands: the flags of
// cmd/machine-controller-manager/app/options/options.go (the core) and
// pkg/util/provider/app/options/options.go (a provider's machine-controller) of
// gardener/machine-controller-manager at 54caf546e0f4, the Lease flags of its
// pkg/util/client/leaderelectionconfig, and --v, --vmodule and --log-flush-frequency, which
// k8s.io/component-base/logs v0.34.0 adds to both. Most are flags of `machinist run` with the
// same name and meaning; those machinist does not act on are below, and each one given is
// logged once at start as ignored. The test TestEveryMCMFlagIsAccepted parses the flag list
// recorded from the built MCM program (testdata/mcm-flags.txt). docs/controllers.md lists them.
//
// Values are parsed as MCM's pflag parses those Gardener writes: --flag=value and --flag value,
// --bool and --bool=true, Go durations.

// ignoredFlag is an MCM flag machinist accepts and does not act on, and why.
type ignoredFlag struct {
	flag cli.Flag
	why  string
}

// mcmIgnoredFlags are MCM's flags that no part of machinist acts on.
func mcmIgnoredFlags() []ignoredFlag {
	mcm := "MCM compatibility (accepted, not acted on)"
	return []ignoredFlag{
		{&cli.StringFlag{Category: mcm, Name: "cloud-provider", Usage: "accepted and ignored, as by MCM"},
			"MCM does not act on it either"},
		{&cli.StringFlag{Category: mcm, Name: "kube-api-content-type", Usage: "accepted and ignored, as by MCM (requests are JSON)"},
			"MCM does not act on it either: its requests are JSON"},
		{&cli.DurationFlag{Category: mcm, Name: "controller-start-interval", Usage: "accepted and ignored, as by MCM"},
			"MCM does not act on it either"},
		{&cli.StringFlag{Category: mcm, Name: "vmodule", Usage: "accepted and ignored: --v sets one verbosity for every file"},
			"machinist's logs have one verbosity for every file (--v)"},
		{&cli.DurationFlag{Category: mcm, Name: "log-flush-frequency", Usage: "accepted and ignored: logs are written unbuffered"},
			"machinist writes its logs unbuffered"},
		{&cli.BoolFlag{Category: mcm, Name: "delete-migrated-machine-class", Usage: "accepted and ignored: a flag of MCM releases before 2023, which Gardener passed until then"},
			"MCM no longer has it (Gardener stopped passing it to MCM's core in gardener/gardener 425656d311, April 2023); machinist has no in-tree machine classes to migrate"},
	}
}

// mcmCompatFlags are the flags `machinist run` and the halves add to run's own: the logging
// flags, MCM's --contention-profiling, and MCM's flags machinist does not act on.
func mcmCompatFlags() []cli.Flag {
	flags := []cli.Flag{
		&cli.IntFlag{Name: "v", Usage: "log verbosity: 0 info, 1 or more debug (as the global --v; also after the subcommand, as MCM takes klog's --v)"},
		&cli.StringFlag{Name: "log-format", Value: "text", Usage: "log format: text or json (as the global --log-format)"},
		&cli.BoolFlag{Category: "Serving and leader election", Name: "contention-profiling", Usage: "with --profiling, also record where goroutines block (/debug/pprof/block), as MCM's flag does"},
	}
	for _, f := range mcmIgnoredFlags() {
		flags = append(flags, f.flag)
	}
	return flags
}

// halfOnlyFlags are the flags of `machinist run` that only one half acts on: given to the other
// half, they are logged as ignored. Gardener passed the provider half's safety flags to MCM's
// core until 2023 (gardener/gardener 425656d311).
var halfOnlyFlags = map[manager.Half][]string{
	manager.CoreHalf: {"set-concurrent-syncs", "autoscaler-scaledown-annotation-during-rollout",
		"safety-up", "safety-down", "machine-safety-overshooting-period"},
	manager.ProviderHalf: {"machine-creation-timeout", "machine-health-timeout", "machine-drain-timeout",
		"machine-inplace-update-timeout", "machine-pv-detach-timeout", "machine-pv-reattach-timeout",
		"machine-max-evict-retries", "machine-preserve-timeout", "node-conditions", "resource-exhausted-retry",
		"fallback-exhausted-ttl", "bootstrap-token-auth-extra-groups", "max-replacements-per-deployment",
		"machine-safety-orphan-vms-period", "machine-safety-orphan-vms-grace-period", "machine-safety-orphan-vms-max-deletes",
		"orphan-dry-run", "machine-safety-apiserver-statuscheck-period", "machine-safety-apiserver-statuscheck-timeout",
		"state-dir", "strict-provider-specs", "aws-ambient-credentials", "driver-endpoint", "driver-exec", "dialin-listen", "prefer-dialin", "prefer-dialin-grace",
		"driver-cert", "driver-key", "driver-cacert", "driver-insecure"},
}

// ignoredFlags maps each flag half h accepts without acting on to why.
func ignoredFlags(h manager.Half) map[string]string {
	out := map[string]string{}
	for _, f := range mcmIgnoredFlags() {
		out[f.flag.Names()[0]] = f.why
	}
	for other, names := range halfOnlyFlags {
		if h == manager.AllInOne || other == h {
			continue
		}
		for _, name := range names {
			out[name] = fmt.Sprintf("a flag of the %s half (MCM's %s); this process runs the %s half (MCM's %s)",
				halfNoun(other), other, halfNoun(h), h)
		}
	}
	if h == manager.CoreHalf {
		// The core's --concurrent-syncs counts sets, as in MCM's core.
		delete(out, "set-concurrent-syncs")
	}
	return out
}

func halfNoun(h manager.Half) string {
	switch h {
	case manager.CoreHalf:
		return "core"
	case manager.ProviderHalf:
		return "provider"
	}
	return "all-in-one"
}

// startName names what starts in the log line of runController.
func startName(h manager.Half) string {
	if h == manager.AllInOne {
		return "machine-controller-manager"
	}
	return fmt.Sprintf("%s (the %s half)", h, halfNoun(h))
}

// logIgnoredFlags logs, once at start, each flag given on the command line that half h accepts
// without acting on, in the order of the command's flags.
func logIgnoredFlags(c *cli.Context, h manager.Half, log *slog.Logger) {
	why := ignoredFlags(h)
	for _, f := range c.Command.Flags {
		name := f.Names()[0]
		if reason, ok := why[name]; ok && c.IsSet(name) {
			log.Info("ignoring flag --"+name, "reason", reason)
		}
	}
}

// mcmCompatOptions applies what MCM's flags mean beyond `machinist run`'s own: in the core half
// --concurrent-syncs counts MachineSets and MachineDeployments (MCM's core) and stands for
// --set-concurrent-syncs; in either half an empty --control-kubeconfig means the target
// cluster's, as in MCM; --contention-profiling needs --profiling, as in MCM.
func mcmCompatOptions(c *cli.Context, h manager.Half, o *manager.Options) error {
	if h == manager.CoreHalf {
		set, sets := c.IsSet("concurrent-syncs"), c.IsSet("set-concurrent-syncs")
		if set && sets && c.Int("concurrent-syncs") != c.Int("set-concurrent-syncs") {
			return fmt.Errorf("%s: --concurrent-syncs %d and --set-concurrent-syncs %d: in the core half both count MachineSets and MachineDeployments: give one",
				h, c.Int("concurrent-syncs"), c.Int("set-concurrent-syncs"))
		}
		switch {
		case set:
			o.ConcurrentSyncs = c.Int("concurrent-syncs")
		case sets:
			o.ConcurrentSyncs = c.Int("set-concurrent-syncs")
		default:
			o.ConcurrentSyncs = manager.DefaultConcurrentSyncs
		}
		if o.ConcurrentSyncs <= 0 {
			return fmt.Errorf("%s: --concurrent-syncs %d: use a positive number of MachineSets and MachineDeployments reconciled in parallel", h, o.ConcurrentSyncs)
		}
	}
	if h != manager.AllInOne && o.ControlKubeconfig == "" && !slices.Contains([]string{"", manager.NoTarget}, o.TargetKubeconfig) {
		o.ControlKubeconfig = o.TargetKubeconfig
	}
	if c.Bool("contention-profiling") {
		if !o.Profiling {
			return fmt.Errorf("run: --contention-profiling needs --profiling (as in MCM): add --profiling, or drop --contention-profiling")
		}
		runtime.SetBlockProfileRate(1)
	}
	return nil
}

// commandLogging applies --v and --log-format given after the subcommand, as MCM's programs
// take klog's --v, over the global ones.
func commandLogging(c *cli.Context) error {
	if !c.IsSet("v") && !c.IsSet("log-format") {
		return nil
	}
	v, format := c.Int("v"), c.String("log-format")
	if lineage := c.Lineage(); len(lineage) > 1 {
		if !c.IsSet("v") {
			v = lineage[1].Int("v")
		}
		if !c.IsSet("log-format") {
			format = lineage[1].String("log-format")
		}
	}
	return setupLogging(c.App.ErrWriter, v, format)
}
