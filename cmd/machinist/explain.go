//go:build !slim

package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/machinist-io/machinist/core/controller/explain"
	"github.com/machinist-io/machinist/core/controller/machine"
)

func init() {
	argRewrites = append(argRewrites, flagsFirst)
	commands = append(commands, &cli.Command{
		Name:      "explain",
		Usage:     "tell why a machine (or a node's machine) or machine deployment is where it is, and what it waits for",
		ArgsUsage: "machine|machinedeployment|node NAME",
		Description: "Reads the object, its conditions, its lastOperation and the events about it, and prints in\n" +
			"order how it came to be, every event, where it stands, and what it waits for now (a drain held\n" +
			"by which PodDisruptionBudget and pods; the budget, pause or approval a rollout waits for).\n" +
			"Works for a machine that is gone while its events last.",
		Flags: append(kubeFlags(),
			&cli.StringFlag{Name: "target-kubeconfig", Usage: "kubeconfig of the cluster of the nodes, pods and PodDisruptionBudgets (default: the same cluster; none: no target cluster)", TakesFile: true, EnvVars: []string{"TARGET_KUBECONFIG"}},
			&cli.StringFlag{Name: "node-conditions", Value: strings.Join(machine.DefaultNodeConditions, ","), Usage: "node condition types that make a machine unhealthy when True (the controller's --node-conditions)"},
			outputFlag(),
		),
		Action: runExplain,
	})
}

func runExplain(c *cli.Context) error {
	if err := checkOutput(c); err != nil {
		return err
	}
	if c.NArg() != 2 {
		return fmt.Errorf("explain: want a kind and a name: machinist explain machine|machinedeployment|node NAME")
	}
	cfg, ns, err := kubeConfig(c)
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	pr, err := planReader(cfg, c.String("target-kubeconfig"))
	if err != nil {
		return err
	}
	pr.Now = time.Now()
	r := explain.Reader{Reader: pr, ProblemConditions: machine.ParseNodeConditions(c.String("node-conditions"))}
	var story explain.Story
	switch kind, name := strings.ToLower(c.Args().Get(0)), c.Args().Get(1); kind {
	case "machine", "machines", "mach":
		w, err := r.Machine(c.Context, ns, name)
		if err != nil {
			return err
		}
		story = explain.Machine(w)
	case "node", "nodes", "no":
		m, err := r.MachineOfNode(c.Context, ns, name)
		if err != nil {
			return err
		}
		w, err := r.Machine(c.Context, ns, m)
		if err != nil {
			return err
		}
		story = explain.Machine(w)
	case "machinedeployment", "machinedeployments", "machdeploy":
		w, err := r.Deployment(c.Context, ns, name)
		if err != nil {
			return err
		}
		story = explain.Deployment(w)
	default:
		return fmt.Errorf("explain: kind %q: use machine, machinedeployment or node", kind)
	}
	if isJSON(c) {
		return writeJSON(c, story)
	}
	_, err = fmt.Fprint(c.App.Writer, story.String())
	return err
}

// flagsFirst moves the flags of explain and plan before their arguments, as kubectl takes them
// anywhere (`kubectl machinist explain machine m1 -n shoot--a`) and the CLI parser stops at the
// first argument. Every flag of theirs but --help takes a value.
func flagsFirst(args []string) []string {
	at := -1
	for i, a := range args {
		if a == "explain" || a == "plan" {
			at = i
			break
		}
		if !strings.HasPrefix(a, "-") && i > 0 {
			return args // another subcommand
		}
	}
	if at < 0 {
		return args
	}
	out := append([]string{}, args[:at+1]...)
	var positional []string
	rest := args[at+1:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		switch {
		case a == "--":
			positional = append(positional, rest[i+1:]...)
			i = len(rest)
		case a == "-" || !strings.HasPrefix(a, "-"):
			positional = append(positional, a)
		case strings.Contains(a, "=") || a == "-h" || a == "--help":
			out = append(out, a)
		default:
			out = append(out, a)
			if i+1 < len(rest) {
				out = append(out, rest[i+1])
				i++
			}
		}
	}
	return append(out, positional...)
}
