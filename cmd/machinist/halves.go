//go:build !slim || machinecontroller

package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/machinist-io/machinist/core/controller/manager"
)

// MCM's two halves under MCM's program names. Gardener runs MCM as one pod of two containers:
// gardenlet's machine-controller-manager (MachineSet, MachineDeployment, the overshooting
// freeze) and the machine-controller sidecar a provider extension adds (the Machine controller,
// orphan VMs, the API-server freeze). The subcommands machine-controller-manager and
// machine-controller run the same controllers as `machinist run`, split as MCM splits them,
// with MCM's flags (mcmflags.go), each on its MCM Lease and port. A link to this binary named
// machine-controller-manager, machine-controller or machine-controller-<provider> runs the
// subcommand of that name (main.go, entrypointOf): that is how the images and `make build`
// provide MCM's entrypoints (docs/migrating-from-mcm.md, "Inside a Gardener seed").

func init() {
	commands = append(commands, halfCommand(manager.CoreHalf), halfCommand(manager.ProviderHalf))
	entrypointOf = halfOfProgram
}

// halfOfProgram names the subcommand a program name stands for: machine-controller-manager,
// machine-controller, or machine-controller-<provider> (the provider half of a binary built
// for that provider, as `make build` names it); "" for any other name.
func halfOfProgram(program string) string {
	core, provider := manager.CoreHalf.String(), manager.ProviderHalf.String()
	switch {
	case program == core:
		return core
	case program == provider || strings.HasPrefix(program, provider+"-"):
		return provider
	}
	return ""
}

// halfCommand is the subcommand of half h: `machinist run` with h's controllers, defaults and
// flag meanings.
func halfCommand(h manager.Half) *cli.Command {
	usage := map[manager.Half]string{
		manager.CoreHalf:     "MCM's core half: the MachineSet, MachineDeployment and overshooting safety controllers, with MCM's flags (Lease machine-controller-manager, port 10258)",
		manager.ProviderHalf: "MCM's provider half: the Machine controller with the orphan-VM and API-server safety, with MCM's flags (Lease machine-controller, port 10259)",
	}[h]
	return withRenamed(&cli.Command{
		Name:  h.String(),
		Usage: usage,
		Description: fmt.Sprintf("Runs what Gardener MCM's %s program runs, accepting every flag it defines (flags machinist does\n"+
			"not act on are logged once as ignored). A link to machinist named %s runs this subcommand,\n"+
			"as the images' entrypoint does. `machinist run` runs both halves in one process.\n"+
			"See docs/migrating-from-mcm.md, \"Inside a Gardener seed\".", h, h),
		Flags:  halfFlags(h),
		Before: commandLogging,
		Action: func(c *cli.Context) error { return runController(c, h) },
	}, runRenamed...)
}

// halfFlags are the flags of `machinist run` (MCM's included, mcmflags.go) with half h's
// defaults: its port, its Lease, for the core --concurrent-syncs counting MachineSets and
// MachineDeployments as in MCM's core, and for the provider --state-dir as `machinist driver`
// has it ($XDG_STATE_HOME/machinist, else ~/.local/state/machinist).
func halfFlags(h manager.Half) []cli.Flag {
	d := manager.DefaultOptionsFor(h)
	var flags []cli.Flag
	for _, f := range runCommand().Flags {
		// run's deprecated names: withRenamed adds them to the half's command again.
		if slices.ContainsFunc(runRenamed, func(r renamed) bool { return r.old == f.Names()[0] }) {
			continue
		}
		flags = append(flags, f)
	}
	for _, f := range flags {
		switch f := f.(type) {
		case *cli.IntFlag:
			switch f.Name {
			case "port":
				f.Value = d.Port
			case "concurrent-syncs":
				if h == manager.CoreHalf {
					f.Value = d.ConcurrentSyncs
					f.Usage = "MachineSets and MachineDeployments reconciled in parallel (MCM's core; --set-concurrent-syncs of `machinist run`)"
				}
			}
		case *cli.StringFlag:
			switch f.Name {
			case "leader-elect-resource-name":
				f.Value = d.LeaderElection.Name
			case "state-dir":
				// The provider half keeps its VMs as a cloud does, beyond its own life: a
				// restarted or standby instance finds the local provider's machines.
				if h == manager.ProviderHalf {
					f.Value = defaultStateDir()
				}
			}
		}
	}
	return flags
}
