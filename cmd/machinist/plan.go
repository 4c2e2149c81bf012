//go:build !slim

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/manager"
	"github.com/machinist-io/machinist/core/controller/plan"
	"github.com/machinist-io/machinist/core/controller/rollout"
)

// exitBlocked is plan's exit code when some object would be blocked (1 stays "the command
// failed"): a CI pipeline tells "this change would not go through" from "plan could not run".
const exitBlocked = 3

func init() {
	commands = append(commands, &cli.Command{
		Name:      "plan",
		Usage:     "show what applying manifests would make the controllers do, changing nothing",
		ArgsUsage: " ",
		Description: "Reads MachineDeployments, MachineSets and MachineClasses from -f (a file, a directory of\n" +
			"YAML/JSON files, or - for stdin) and, against the live cluster, says per object what the\n" +
			"controllers would do with MCM's rules: None, Scale, InPlace (which fields reach what), Rollout\n" +
			"(machines replaced, maxSurge and maxUnavailable, the steps, the drains and the\n" +
			"PodDisruptionBudgets that would block them, an estimate) or Blocked (by what). Exit code 0 when\n" +
			"everything would apply or roll, 3 when something would be blocked, 1 when plan itself failed.",
		Flags: append(kubeFlags(),
			&cli.StringSliceFlag{Name: "filename", Aliases: []string{"f"}, Usage: "manifests: a file, a directory, or - for stdin (repeatable)", Required: true},
			&cli.StringFlag{Name: "target-kubeconfig", Usage: "kubeconfig of the cluster of the nodes, pods and PodDisruptionBudgets (default: the same cluster; none: no target cluster)", TakesFile: true, EnvVars: []string{"TARGET_KUBECONFIG"}},
			outputFlag(),
		),
		Action: runPlan,
	})
}

// kubeFlags are kubectl's usual flags, so `kubectl machinist` takes them too.
func kubeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "kubeconfig", Usage: "kubeconfig of the cluster of the machine objects (default: $KUBECONFIG, else ~/.kube/config)", TakesFile: true},
		&cli.StringFlag{Name: "context", Usage: "the kubeconfig context to use"},
		&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Usage: "namespace of objects that name none (default: the context's, else default)", EnvVars: []string{"CONTROL_NAMESPACE"}},
	}
}

// kubeConfig loads the cluster as kubectl would from --kubeconfig and --context, with the
// namespace of -n or the context.
func kubeConfig(c *cli.Context) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.String("kubeconfig")
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: c.String("context")})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("--kubeconfig/--context: %w", err)
	}
	ns := c.String("namespace")
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil || ns == "" {
			ns = "default"
		}
	}
	return cfg, ns, nil
}

func runPlan(c *cli.Context) error {
	if err := checkOutput(c); err != nil {
		return err
	}
	cfg, ns, err := kubeConfig(c)
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	objs, skipped, err := readManifests(c.StringSlice("filename"), c.App.Reader, ns)
	if err != nil {
		return err
	}
	if len(skipped) > 0 {
		fmt.Fprintf(c.App.ErrWriter, "plan: left out %d objects of other kinds (the controllers do not act on them): %s\n", len(skipped), strings.Join(skipped, ", "))
	}
	r, err := planReader(cfg, c.String("target-kubeconfig"))
	if err != nil {
		return err
	}
	results, err := planAll(c.Context, r, objs)
	if err != nil {
		return err
	}
	if isJSON(c) {
		err = writeJSON(c, results)
	} else {
		err = writePlanTable(c.App.Writer, results)
	}
	if err != nil {
		return err
	}
	if n := countBlocked(results); n > 0 {
		return cli.Exit(fmt.Sprintf("plan: %d of %d objects would be blocked (see blockedBy)", n, len(results)), exitBlocked)
	}
	return nil
}

func planReader(cfg *rest.Config, target string) (plan.Reader, error) {
	control, err := client.New(cfg, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		return plan.Reader{}, fmt.Errorf("plan: client of the cluster: %w", err)
	}
	r := plan.Reader{Control: control, Target: control, Now: time.Now()}
	switch target {
	case "":
	case "none":
		r.Target = nil
	default:
		tcfg, err := clientcmd.BuildConfigFromFlags("", target)
		if err != nil {
			return plan.Reader{}, fmt.Errorf("plan: --target-kubeconfig: %w", err)
		}
		if r.Target, err = client.New(tcfg, client.Options{Scheme: manager.Scheme()}); err != nil {
			return plan.Reader{}, fmt.Errorf("plan: client of the target cluster: %w", err)
		}
	}
	return r, nil
}

func planAll(ctx context.Context, r plan.Reader, objs []client.Object) ([]plan.Result, error) {
	out := make([]plan.Result, 0, len(objs))
	for _, o := range objs {
		res, err := r.Object(ctx, o)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}

func countBlocked(results []plan.Result) int {
	n := 0
	for _, r := range results {
		if r.Action == rollout.Blocked {
			n++
		}
	}
	return n
}

// readManifests decodes every MachineDeployment, MachineSet and MachineClass of the paths
// (files, directories of .yaml/.yml/.json files, - for stdin); objects of other kinds are left
// out and named (kind/name), as a directory kubectl applies often holds them too.
func readManifests(paths []string, stdin io.Reader, ns string) ([]client.Object, []string, error) {
	var out []client.Object
	var skipped []string
	for _, p := range paths {
		files, err := planFiles(p)
		if err != nil {
			return nil, nil, err
		}
		for _, f := range files {
			var data []byte
			if f == "-" {
				data, err = io.ReadAll(stdin)
			} else {
				data, err = os.ReadFile(f)
			}
			if err != nil {
				return nil, nil, fmt.Errorf("plan: -f %s: %w", f, err)
			}
			objs, other, err := decodeManifests(f, data, ns)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, objs...)
			skipped = append(skipped, other...)
		}
	}
	if len(out) == 0 {
		return nil, nil, errors.New("plan: -f: no MachineDeployment, MachineSet or MachineClass found: plan says what the controllers would do with these")
	}
	return out, skipped, nil
}

func planFiles(p string) ([]string, error) {
	if p == "-" {
		return []string{p}, nil
	}
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("plan: -f: %w", err)
	}
	if !st.IsDir() {
		return []string{p}, nil
	}
	var files []string
	for _, ext := range []string{"*.yaml", "*.yml", "*.json"} {
		m, _ := filepath.Glob(filepath.Join(p, ext))
		files = append(files, m...)
	}
	sort.Strings(files)
	return files, nil
}

func decodeManifests(file string, data []byte, ns string) ([]client.Object, []string, error) {
	var out []client.Object
	var skipped []string
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, skipped, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("plan: %s: document %d: %w", file, i, err)
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, nil, fmt.Errorf("plan: %s: document %d: %w", file, i, err)
		}
		if meta.Kind == "" {
			continue // an empty document
		}
		var obj client.Object
		switch meta.Kind {
		case "MachineDeployment":
			obj = &v1alpha1.MachineDeployment{}
		case "MachineSet":
			obj = &v1alpha1.MachineSet{}
		case "MachineClass":
			obj = &v1alpha1.MachineClass{}
		default:
			skipped = append(skipped, meta.Kind+"/"+meta.Metadata.Name)
			continue
		}
		if meta.APIVersion != v1alpha1.SchemeGroupVersion.String() {
			return nil, nil, fmt.Errorf("plan: %s: document %d: apiVersion %q: use %s", file, i, meta.APIVersion, v1alpha1.SchemeGroupVersion)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, nil, fmt.Errorf("plan: %s: document %d (%s): %w", file, i, meta.Kind, err)
		}
		if obj.GetNamespace() == "" {
			obj.SetNamespace(ns)
		}
		out = append(out, obj)
	}
}

// writePlanTable writes one line per object, then what each would do in detail.
func writePlanTable(w io.Writer, results []plan.Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAMESPACE\tNAME\tACTION\tREPLACED\tSURGE\tUNAVAILABLE\tESTIMATE")
	for _, r := range results {
		est := r.Estimate
		if est == "" {
			est = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", r.Kind, r.Namespace, r.Name, r.Action, r.MachinesReplaced, r.MaxSurge, r.MaxUnavailable, est)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		writePlanDetail(w, r)
	}
	return nil
}

func writePlanDetail(w io.Writer, r plan.Result) {
	var b strings.Builder
	for _, f := range r.Fields {
		fmt.Fprintf(&b, "  in place: %s reaches the %s\n", f.Path, f.Reaches)
	}
	if len(r.Nodes) > 0 {
		fmt.Fprintf(&b, "  nodes: %s\n", strings.Join(r.Nodes, ", "))
	}
	for i, s := range r.Steps {
		fmt.Fprintf(&b, "  step %d: %s\n", i+1, orNone(s))
	}
	for _, d := range r.Drains {
		fmt.Fprintf(&b, "  drain: machine %s (node %s)", d.Machine, orNone(d.Node))
		for _, bl := range d.Blockers {
			fmt.Fprintf(&b, "; blocked by %s", bl)
		}
		b.WriteString("\n")
	}
	if r.NewMachineClass != "" {
		fmt.Fprintf(&b, "  new machines get class %s\n", r.NewMachineClass)
	}
	for _, bl := range r.BlockedBy {
		fmt.Fprintf(&b, "  blocked (%s): %s\n", bl.Reason, bl.Message)
	}
	if r.EstimateBasis != "" {
		fmt.Fprintf(&b, "  estimate: %s\n", r.EstimateBasis)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	if b.Len() > 0 {
		fmt.Fprintf(w, "\n%s %s/%s:\n%s", r.Kind, r.Namespace, r.Name, b.String())
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
