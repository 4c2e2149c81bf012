//go:build !slim

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/manager"
	"github.com/machinist-io/machinist/core/controller/standby"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/deployments"
	"github.com/machinist-io/machinist/harness/localcontrolplane"
	"github.com/machinist-io/machinist/internal/livedir"
)

func init() { commands = append(commands, devCommand()) }

// devCommand is `machinist dev`, what `make run` starts: a throw-away local control plane (with
// kube-scheduler and kube-controller-manager), the controller manager with the local provider,
// and the samples, with progress until the machines and the sample workload are Running. It
// lives in the product binary next to `machinist controlplane` (both run
// harness/localcontrolplane) so one process owns everything and Ctrl-C cleans it all up.
func devCommand() *cli.Command {
	return &cli.Command{
		Name:  "dev",
		Usage: "start a local control plane, the controller manager with the local provider and the samples",
		Description: "Starts etcd, kube-apiserver, kube-scheduler and kube-controller-manager on 127.0.0.1 (binaries\n" +
			"from `make tools`), runs the controllers of `machinist run` in this process with the local provider\n" +
			"(its machines become real Nodes of the same API server and run the pods bound to them), applies\n" +
			"the sample manifests and shows the progress of the machines and the sample workload. It also\n" +
			"writes certificates and a cloud-config for pointing a Cluster Autoscaler at the cluster through\n" +
			"`machinist autoscaler`. Ctrl-C stops everything and removes the temporary directory (unless\n" +
			"--dir is given).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dir", Usage: "keep the control plane, machines and log here across runs (default: a temporary directory, removed on exit)"},
			&cli.StringFlag{Name: "bin-dir", Usage: "directory with etcd and kube-apiserver (default: next to this binary, $KUBEBUILDER_ASSETS, or the repository's bin/)"},
			&cli.StringFlag{Name: "samples", Usage: "directory of manifests to apply (default: the repository's kubernetes/samples/local)"},
			&cli.IntFlag{Name: "port", Value: manager.DefaultPort, Usage: "port of /metrics, /healthz and /readyz; -1 disables them"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "how long to wait for the sample machines and workload to be Running"},
			&cli.BoolFlag{Name: "kube-scheduler", Value: true, Usage: "run kube-scheduler (--kube-scheduler=false: pods stay unscheduled)"},
			&cli.BoolFlag{Name: "kube-controller-manager", Value: true, Usage: "run kube-controller-manager (--kube-controller-manager=false: Deployments make no pods, nodes are watched by the local provider)"},
		},
		Action: runDev,
	}
}

func runDev(c *cli.Context) error {
	samples, files, err := devSamples(c)
	if err != nil {
		return err
	}
	// Cleanup must not die with a closed stdout (`make run | tee`, Ctrl-C): writes then fail
	// instead of raising SIGPIPE.
	signal.Ignore(syscall.SIGPIPE)
	s, err := newDevSession(c)
	if err != nil {
		return err
	}
	defer s.close()

	cp, err := s.startControlPlane()
	if err != nil {
		return err
	}
	defer s.stopControlPlane(cp)
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	done, err := s.startControllers(ctx, cp)
	if err != nil {
		return err
	}
	defer s.awaitControllers(cancel, done)

	cl, err := client.New(cp.Config, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		return err
	}
	var applied []*unstructured.Unstructured
	for _, f := range files {
		objs, err := applyFile(ctx, cl, f)
		if err != nil {
			return err
		}
		applied = append(applied, objs...)
	}
	s.step("applied %s", samples)
	fmt.Fprintf(s.out, "\n  export KUBECONFIG=%s\n  %s\n\n", cp.KubeconfigPath, kubectlHint())
	if err := s.watch(ctx, cl, applied, done); err != nil {
		return err
	}
	if err := printAutoscalerHint(s.out, s.dir, cp.KubeconfigPath); err != nil {
		return err
	}
	return s.run(ctx, done)
}

// devSamples is the directory of manifests to apply (--samples, else the repository's local
// samples) and its files.
func devSamples(c *cli.Context) (string, []string, error) {
	samples := c.String("samples")
	if samples == "" {
		root, err := localcontrolplane.RepoRoot()
		if err != nil {
			return "", nil, fmt.Errorf("dev: no --samples given and not inside the machinist repository: %w", err)
		}
		samples = filepath.Join(root, "kubernetes", "samples", "local")
	}
	files, err := manifestFiles(samples)
	return samples, files, err
}

// devSession is one `machinist dev`: its directory (a temporary one unless --dir), its log
// file, and the progress it prints.
type devSession struct {
	c       *cli.Context
	out     io.Writer
	start   time.Time
	dir     string
	temp    *livedir.Dir // the temporary directory, removed on close; nil with --dir
	logPath string
	logFile *os.File
	log     *slog.Logger
	cpOpts  localcontrolplane.Options
}

// newDevSession makes the session's directory and opens its log.
func newDevSession(c *cli.Context) (*devSession, error) {
	s := &devSession{c: c, out: c.App.Writer, start: time.Now(), dir: c.String("dir")}
	var err error
	if s.dir == "" {
		if s.temp, err = livedir.New("machinist-dev-"); err != nil { // also removes those of killed runs
			return nil, err
		}
		s.dir = s.temp.Path()
	}
	if s.dir, err = filepath.Abs(s.dir); err != nil {
		s.close()
		return nil, err
	}
	s.logPath = filepath.Join(s.dir, "machinist.log")
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		s.close()
		return nil, err
	}
	if s.logFile, err = os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		s.close()
		return nil, err
	}
	s.log = slog.New(slog.NewTextHandler(s.logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))
	return s, nil
}

// close closes the log and removes the temporary directory.
func (s *devSession) close() {
	if s.logFile != nil {
		s.logFile.Close()
	}
	if s.temp != nil {
		if err := s.temp.Remove(); err != nil {
			fmt.Fprintf(s.c.App.ErrWriter, "remove %s: %v\n", s.temp.Path(), err)
		}
	}
}

// step prints a line of progress with the seconds since the start.
func (s *devSession) step(format string, args ...any) {
	fmt.Fprintf(s.out, "[%5.1fs] %s\n", time.Since(s.start).Seconds(), fmt.Sprintf(format, args...))
}

// startControlPlane starts etcd, kube-apiserver and, unless turned off, kube-scheduler and
// kube-controller-manager in the session's directory.
func (s *devSession) startControlPlane() (*localcontrolplane.ControlPlane, error) {
	c := s.c
	s.cpOpts = localcontrolplane.Options{
		Dir: filepath.Join(s.dir, "controlplane"), BinDir: c.String("bin-dir"), Log: s.log,
		KubeScheduler: c.Bool("kube-scheduler"), KubeControllerManager: c.Bool("kube-controller-manager"),
	}
	s.step("starting %s in %s", strings.Join(controlPlaneComponents(s.cpOpts), ", "), s.dir)
	if s.cpOpts.BinDir == "" {
		s.cpOpts.BinDir = besideExecutable()
	}
	cp, err := localcontrolplane.Start(c.Context, s.cpOpts)
	if err != nil {
		return nil, err
	}
	s.step("control plane ready at %s", cp.Config.Host)
	return cp, nil
}

func (s *devSession) stopControlPlane(cp *localcontrolplane.ControlPlane) {
	fmt.Fprintln(s.out, "stopping the controllers and the control plane")
	if err := cp.Stop(); err != nil {
		fmt.Fprintf(s.c.App.ErrWriter, "stop control plane: %v\n", err)
	}
}

// startControllers runs the controller manager of `machinist run` in this process until ctx
// ends; done receives how it ended.
func (s *devSession) startControllers(ctx context.Context, cp *localcontrolplane.ControlPlane) (chan error, error) {
	opts := manager.DefaultOptions()
	opts.ControlConfig = cp.Config
	opts.StateDir = filepath.Join(s.dir, "state")
	opts.Port = s.c.Int("port")
	opts.LeaderElection.Enabled = false
	opts.Log = s.log
	m, err := manager.New(opts)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	s.step("controllers running with providers %s (log: %s)", strings.Join(registry.Names(), ", "), s.logPath)
	return done, nil
}

// awaitControllers stops the controllers and waits for them.
func (s *devSession) awaitControllers(cancel context.CancelFunc, done chan error) {
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(s.c.App.ErrWriter, "controllers: %v\n", err)
	}
}

// watch shows the progress of the machines and then of the sample workload (which needs
// kube-scheduler and kube-controller-manager) until they are Running or --timeout passes.
func (s *devSession) watch(ctx context.Context, cl client.Client, applied []*unstructured.Unstructured, done chan error) error {
	deadline := time.Now().Add(s.c.Duration("timeout"))
	if err := watchProgress(ctx, cl, s.out, s.step, deadline, done); err != nil {
		return err
	}
	workloads := workloadsOf(applied)
	switch {
	case len(workloads) == 0:
	case !s.cpOpts.KubeControllerManager || !s.cpOpts.KubeScheduler:
		s.step("sample workload not started: it needs kube-scheduler and kube-controller-manager")
	default:
		return watchWorkloads(ctx, cl, s.step, workloads, deadline, done)
	}
	return nil
}

// run keeps everything running until Ctrl-C, or until the controllers stop by themselves.
func (s *devSession) run(ctx context.Context, done chan error) error {
	if s.temp != nil {
		fmt.Fprintln(s.out, "running; press Ctrl-C to stop and clean up")
	} else {
		fmt.Fprintf(s.out, "running; press Ctrl-C to stop (the control plane and machines stay in %s for the next run)\n", s.dir)
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-done:
		done <- err // for the deferred wait
		return fmt.Errorf("dev: controllers stopped: %w", err)
	}
}

// kubectlHint says how to watch the machines, and how to get kubectl when it is missing.
func kubectlHint() string {
	if _, err := exec.LookPath("kubectl"); err == nil {
		return "kubectl get machines -w"
	}
	if exe, err := os.Executable(); err == nil {
		if k := filepath.Join(filepath.Dir(exe), "kubectl"); isFile(k) {
			return k + " get machines -w"
		}
	}
	return "kubectl get machines -w   (kubectl is not on PATH: `make kubectl` builds the pinned one into bin/)"
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// manifestFiles returns the YAML files of a directory (or the file itself), sorted, skipping a
// kustomization.yaml.
func manifestFiles(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("dev: samples: %w", err)
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || n == "kustomization.yaml" || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml") || strings.HasSuffix(n, ".json")) {
			continue
		}
		files = append(files, filepath.Join(path, n))
	}
	sort.Strings(files)
	if len(files) == 0 {
		return nil, fmt.Errorf("dev: no manifests in %s", path)
	}
	return files, nil
}

// applyFile creates every object of a YAML file, or updates it when it exists, and returns them.
func applyFile(ctx context.Context, c client.Client, path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var applied []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return applied, nil
			}
			return nil, fmt.Errorf("dev: %s: %w", path, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if ns := u.GetNamespace(); ns != "" && ns != "default" {
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("dev: create namespace %s: %w", ns, err)
			}
		}
		err := c.Create(ctx, u)
		if apierrors.IsAlreadyExists(err) {
			cur := &unstructured.Unstructured{}
			cur.SetGroupVersionKind(u.GroupVersionKind())
			if err = c.Get(ctx, client.ObjectKeyFromObject(u), cur); err == nil {
				u.SetResourceVersion(cur.GetResourceVersion())
				err = c.Update(ctx, u)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("dev: %s: apply %s %s: %w", path, u.GetKind(), u.GetName(), err)
		}
		applied = append(applied, u)
	}
}

// watchProgress prints the machines' phases whenever they change, until every machine of every
// MachineDeployment is Running (or the deadline passes).
func watchProgress(ctx context.Context, c client.Client, out io.Writer, step func(string, ...any), deadline time.Time, done chan error) error {
	last, summary := "", ""
	return watchUntil(ctx, deadline, done, func(ctx context.Context) (bool, error) {
		var mds v1alpha1.MachineDeploymentList
		var ms v1alpha1.MachineList
		if err := c.List(ctx, &mds); err != nil {
			return false, fmt.Errorf("dev: list machine deployments: %w", err)
		}
		if err := c.List(ctx, &ms); err != nil {
			return false, fmt.Errorf("dev: list machines: %w", err)
		}
		want := int32(0)
		for _, d := range mds.Items {
			want += d.Spec.Replicas
		}
		phases, nodes, standbyN := tally(ms.Items)
		summary = summarize(phases) + poolsText(ctx, c)
		if summary != last {
			step("machines %d/%d Running: %s", phases["Running"], want, summary)
			last = summary
		}
		if want > 0 && phases["Running"] == int(want) && len(ms.Items)-standbyN == int(want) {
			sort.Strings(nodes)
			step("all %d machines Running; nodes: %s", want, strings.Join(nodes, ", "))
			return true, nil
		}
		return false, nil
	}, func() error {
		return fmt.Errorf("dev: the machines are not Running by the --timeout (%s): see the log and `kubectl describe machines`", summary)
	})
}

// poolsText is each PoolPolicy's progress, "; pool workers: 4/6 updated, surge 1/1, RollingOut",
// or "" when there is none (or machinist's CRDs are not installed).
func poolsText(ctx context.Context, c client.Client) string {
	var pools machinistv1alpha1.PoolPolicyList
	if err := c.List(ctx, &pools); err != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range pools.Items {
		st := p.Status
		reason := "pending"
		if cond := meta.FindStatusCondition(st.Conditions, machinistv1alpha1.PoolProgressing); cond != nil {
			reason = cond.Reason
		}
		fmt.Fprintf(&b, "; pool %s: %d/%d updated, surge %d/%d, %s", p.Name, st.UpdatedReplicas, st.Replicas,
			st.Budget.SurgeInUse, st.Budget.MaxSurge, reason)
	}
	return b.String()
}

// tally counts machines by phase ("Creating" without one, "Terminating" while deleted) and lists
// the nodes of the Running ones. Standby machines count apart, as "Standby <state>" (they are
// not replicas), and their number is returned.
func tally(ms []v1alpha1.Machine) (phases map[string]int, nodes []string, standbyN int) {
	phases = map[string]int{}
	for _, m := range ms {
		p := string(m.Status.CurrentStatus.Phase)
		if p == "" {
			p = "Creating"
		}
		if _, isStandby := m.Annotations[standby.Annotation]; isStandby && m.DeletionTimestamp == nil {
			phases["Standby "+m.Annotations[standby.AnnotationState]]++
			standbyN++
			continue
		}
		if m.DeletionTimestamp != nil {
			p = "Terminating"
		}
		phases[p]++
		if p == string(v1alpha1.MachineRunning) {
			nodes = append(nodes, m.Labels[v1alpha1.LabelNode])
		}
	}
	return phases, nodes, standbyN
}

func summarize(phases map[string]int) string {
	if len(phases) == 0 {
		return "none yet"
	}
	keys := make([]string, 0, len(phases))
	for k := range phases {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, phases[k])
	}
	return strings.Join(parts, ", ")
}

// controlPlaneComponents names what a control plane of opts runs, for the progress output.
func controlPlaneComponents(o localcontrolplane.Options) []string {
	names := []string{"etcd", "kube-apiserver"}
	if o.KubeScheduler {
		names = append(names, "kube-scheduler")
	}
	if o.KubeControllerManager {
		names = append(names, "kube-controller-manager")
	}
	return names
}

// workloadsOf returns the Deployments and DaemonSets among the applied sample objects.
func workloadsOf(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, u := range objs {
		if gvk := u.GroupVersionKind(); gvk.Group == "apps" && (gvk.Kind == "Deployment" || gvk.Kind == "DaemonSet") {
			out = append(out, u)
		}
	}
	return out
}

// watchUntil calls look every half second until it reports done or fails. Ctrl-C (ctx) ends it
// without an error; the controllers stopping ends it with theirs (put back on done for the caller
// that waits for them); the deadline passing ends it with timedOut's error.
func watchUntil(ctx context.Context, deadline time.Time, done chan error, look func(context.Context) (bool, error), timedOut func() error) error {
	var failed error
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Until(deadline), true, func(context.Context) (bool, error) {
		ok, err := look(ctx) // ctx, not the poll's: a look that outlives the deadline finishes
		if err != nil || ok {
			failed = err
			return ok, err
		}
		select {
		case err := <-done:
			done <- err
			failed = fmt.Errorf("dev: controllers stopped: %w", err)
			return false, failed
		default:
			return false, nil
		}
	})
	switch {
	case failed != nil:
		return failed
	case err == nil, ctx.Err() != nil:
		return nil
	default:
		return timedOut()
	}
}

// watchWorkloads prints the sample workloads' pods whenever they change, until every
// Deployment and DaemonSet has all its pods Running and Ready (or the deadline passes).
func watchWorkloads(ctx context.Context, c client.Client, step func(string, ...any), workloads []*unstructured.Unstructured, deadline time.Time, done chan error) error {
	last, summary := "", ""
	return watchUntil(ctx, deadline, done, func(ctx context.Context) (bool, error) {
		var lines []string
		complete := true
		for _, w := range workloads {
			line, ready, err := workloadState(ctx, c, w)
			if err != nil {
				return false, err
			}
			lines = append(lines, line)
			complete = complete && ready
		}
		summary = strings.Join(lines, "; ")
		if summary != last {
			step("workload %s", summary)
			last = summary
		}
		return complete, nil
	}, func() error {
		return fmt.Errorf("dev: the sample workload is not Running by the --timeout (%s): see `kubectl get pods -o wide` and `kubectl describe pods`", summary)
	})
}

// workloadState describes a Deployment's or DaemonSet's pods ("deployment/hello 3/3 Running
// on local-a, local-b") and reports whether all it wants are Running and Ready.
func workloadState(ctx context.Context, c client.Client, w *unstructured.Unstructured) (string, bool, error) {
	key := client.ObjectKeyFromObject(w)
	var want int32
	var selector *metav1.LabelSelector
	switch w.GetKind() {
	case "Deployment":
		var d appsv1.Deployment
		if err := c.Get(ctx, key, &d); err != nil {
			return "", false, fmt.Errorf("dev: get deployment %s: %w", key, err)
		}
		want, selector = ptr.Deref(d.Spec.Replicas, 1), d.Spec.Selector
	default:
		var ds appsv1.DaemonSet
		if err := c.Get(ctx, key, &ds); err != nil {
			return "", false, fmt.Errorf("dev: get daemonset %s: %w", key, err)
		}
		want, selector = ds.Status.DesiredNumberScheduled, ds.Spec.Selector
	}
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return "", false, fmt.Errorf("dev: %s %s: %w", w.GetKind(), key, err)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(key.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return "", false, fmt.Errorf("dev: list pods of %s: %w", key, err)
	}
	running := 0
	nodes := map[string]bool{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podIsReady(&p) {
			running++
			nodes[p.Spec.NodeName] = true
		}
	}
	line := fmt.Sprintf("%s %s: %d/%d pods Running", strings.ToLower(w.GetKind()), key.Name, running, want)
	if len(nodes) > 0 {
		names := make([]string, 0, len(nodes))
		for n := range nodes {
			names = append(names, n)
		}
		sort.Strings(names)
		line += " on " + strings.Join(names, ", ")
	}
	return line, want > 0 && running == int(want), nil
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// printAutoscalerHint writes certificates and a Cluster Autoscaler cloud-config for the local
// cluster into <dir>/autoscaler and prints how to run `machinist autoscaler` and Cluster
// Autoscaler (--cloud-provider=externalgrpc) against it.
func printAutoscalerHint(out io.Writer, dir, kubeconfig string) error {
	asDir := filepath.Join(dir, "autoscaler")
	files, err := localcontrolplane.LocalMTLS(asDir, "machinist-autoscaler", "cluster-autoscaler")
	if err != nil {
		return fmt.Errorf("dev: autoscaler certificates: %w", err)
	}
	cloudConfig := filepath.Join(asDir, "cloud-config.yaml")
	body := fmt.Sprintf("address: localhost%s\ncert: %s\nkey: %s\ncacert: %s\ngrpc_timeout: 10s\n",
		localAutoscalerAddress, files.ClientCert, files.ClientKey, files.CA)
	if err := os.WriteFile(cloudConfig, []byte(body), 0o600); err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	self := "machinist"
	if exe, err := os.Executable(); err == nil {
		self = exe
	}
	fmt.Fprintf(out, "\n  Cluster Autoscaler: MachineDeployments annotated with %s and %s are node groups.\n"+
		"  %s autoscaler --control-kubeconfig %s \\\n      --listen 127.0.0.1%s --http-address 127.0.0.1:8087 --cert %s --key %s --cacert %s\n"+
		"  cluster-autoscaler --cloud-provider=externalgrpc --cloud-config=%s --kubeconfig=%s\n\n",
		deployments.AnnotationMinSize, deployments.AnnotationMaxSize,
		self, kubeconfig, localAutoscalerAddress, files.ServerCert, files.ServerKey, files.CA, cloudConfig, kubeconfig)
	return nil
}

// localAutoscalerAddress is the port `machinist autoscaler` listens on in the printed hint.
const localAutoscalerAddress = ":8086"
