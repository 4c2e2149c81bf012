// Command benchscale is `make bench-scale`: it starts a real etcd + kube-apiserver, runs
// `machinist run` as a child process with the local provider, creates one MachineDeployment of
// --machines machines and measures how long until all are Running, the controller process's
// peak RSS and CPU time, and the API requests per machine (from kube-apiserver's
// apiserver_request_total, by resource and verb). It prints a Markdown section for
// docs/performance.md.
//
// The local provider's node agents (the "cloud" and the kubelets of this benchmark) run inside
// the controller process, so its RSS and CPU include 1000 simulated nodes; their lease renewals
// and node status updates show up in the request counts under leases and nodes.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/core/testenv/controlplane"
	"github.com/machinist-io/machinist/grpcbridge"
	_ "github.com/machinist-io/machinist/providers/local"
)

func main() {
	machinist := flag.String("machinist", "bin/machinist", "the machinist binary to run")
	binDir := flag.String("bin-dir", "", "directory with etcd and kube-apiserver (default: the repository's bin/)")
	machines := flag.Int("machines", 1000, "machines in the MachineDeployment")
	timeout := flag.Duration("timeout", 15*time.Minute, "give up after this long")
	keep := flag.Bool("keep", false, "keep the temporary directory (logs, state) for inspection")
	separate := flag.Bool("separate-provider", false, "run the local provider in this process and serve it to the controller over the gRPC bridge (--driver-endpoint on a unix socket), so the controller's numbers are its own")
	flag.Parse()
	extra := flag.Args() // more `machinist run` flags after --

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *machinist, *binDir, *machines, *timeout, *keep, *separate, extra); err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale:", err)
		os.Exit(1)
	}
}

type result struct {
	machines       int
	allRunning     time.Duration
	firstRunning   time.Duration
	halfRunning    time.Duration
	peakRSS        int64 // bytes
	cpu            time.Duration
	requests       map[string]float64 // "resource verb" -> count during the run
	totalRequests  float64
	controllerArgs []string
	providerCPU    time.Duration // the local provider in this process (--separate-provider)
	providerRSS    int64
}

func run(ctx context.Context, machinist, binDir string, n int, timeout time.Duration, keep, separate bool, extra []string) error {
	machinist, err := filepath.Abs(machinist)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "machinist-bench-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Printf("keeping %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	fmt.Printf("starting etcd and kube-apiserver …\n")
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: filepath.Join(dir, "controlplane"), BinDir: binDir, Log: log})
	if err != nil {
		return err
	}
	defer cp.Stop()
	c, err := client.NewWithWatch(cp.Config, client.Options{Scheme: controlplane.Scheme})
	if err != nil {
		return err
	}

	port, err := freePort()
	if err != nil {
		return err
	}
	if separate {
		sock := "unix://" + filepath.Join(dir, "local.sock")
		stopProvider, err := serveLocal(cp.Config, filepath.Join(dir, "provider-state"), sock)
		if err != nil {
			return err
		}
		defer stopProvider()
		extra = append([]string{"--driver-endpoint", "local=" + sock, "--insecure"}, extra...)
	}
	args := append([]string{"run",
		"--control-kubeconfig", cp.KubeconfigPath,
		"--state-dir", filepath.Join(dir, "state"),
		"--leader-elect=false",
		"--address", "127.0.0.1", "--port", strconv.Itoa(port),
	}, extra...)
	logFile, err := os.Create(filepath.Join(dir, "machinist.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, machinist, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", machinist, err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		waitDone := make(chan struct{})
		go func() { _ = cmd.Wait(); close(waitDone) }()
		select {
		case <-waitDone:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-waitDone
		}
	}()
	fmt.Printf("machinist run (pid %d) %s\n", cmd.Process.Pid, strings.Join(args[1:], " "))
	if err := waitHealthy(ctx, port); err != nil {
		return fmt.Errorf("%w (log: %s)", err, logFile.Name())
	}

	if err := createClass(ctx, c); err != nil {
		return err
	}
	before, err := requestCounts(ctx, cp.Config)
	if err != nil {
		return err
	}
	phases := map[string]v1alpha1.MachinePhase{}
	wi, err := watchMachines(ctx, c, phases)
	if err != nil {
		return err
	}
	defer func() { wi.Stop() }()

	start := time.Now()
	if err := createDeployment(ctx, c, n); err != nil {
		return err
	}
	fmt.Printf("created MachineDeployment bench with %d replicas\n", n)
	res := result{machines: n, controllerArgs: args[1:]}
	running := 0
	var peak int64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline := time.After(timeout)
	lastReport := time.Now()
	for running < n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("only %d of %d machines Running after %s (log: %s)", running, n, timeout, logFile.Name())
		case ev, ok := <-wi.ResultChan():
			if !ok {
				// The API server ends watches now and then: list again and resume.
				if wi, err = watchMachines(ctx, c, phases); err != nil {
					return err
				}
				continue
			}
			m, isMachine := ev.Object.(*v1alpha1.Machine)
			if !isMachine {
				continue
			}
			if ev.Type == watch.Deleted {
				delete(phases, m.Name)
			} else {
				phases[m.Name] = m.Status.CurrentStatus.Phase
			}
			running = 0
			for _, p := range phases {
				if p == v1alpha1.MachineRunning {
					running++
				}
			}
			el := time.Since(start)
			if running >= 1 && res.firstRunning == 0 {
				res.firstRunning = el
			}
			if running >= n/2 && res.halfRunning == 0 {
				res.halfRunning = el
			}
		case <-tick.C:
			if rss := vmHWM(cmd.Process.Pid); rss > peak {
				peak = rss
			}
			if time.Since(lastReport) >= 5*time.Second {
				lastReport = time.Now()
				fmt.Printf("[%6.1fs] machines %d, Running %d, controller RSS peak %.0f MiB\n", time.Since(start).Seconds(), len(phases), running, float64(peak)/(1<<20))
			}
		}
	}
	res.allRunning = time.Since(start)
	after, err := requestCounts(ctx, cp.Config)
	if err != nil {
		return err
	}
	if rss := vmHWM(cmd.Process.Pid); rss > peak {
		peak = rss
	}
	res.peakRSS = peak
	res.cpu = cpuTime(cmd.Process.Pid)
	if separate {
		res.providerCPU = cpuTime(os.Getpid())
		res.providerRSS = vmHWM(os.Getpid())
	}
	res.requests = map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			res.requests[k] = d
			res.totalRequests += d
		}
	}
	report(os.Stdout, res)
	return nil
}

// watchMachines lists the machines into phases and watches them from the list's version on.
func watchMachines(ctx context.Context, c client.WithWatch, phases map[string]v1alpha1.MachinePhase) (watch.Interface, error) {
	var list v1alpha1.MachineList
	if err := c.List(ctx, &list, client.InNamespace("default")); err != nil {
		return nil, fmt.Errorf("list machines: %w", err)
	}
	clear(phases)
	for _, m := range list.Items {
		phases[m.Name] = m.Status.CurrentStatus.Phase
	}
	return c.Watch(ctx, &v1alpha1.MachineList{}, client.InNamespace("default"),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
}

// serveLocal opens the local provider in this process (its node agents register Nodes in the
// control plane) and serves it over the gRPC bridge on a unix socket, as a slim provider sidecar
// would.
func serveLocal(cfg *rest.Config, stateDir, sock string) (func(), error) {
	d, err := registry.Open("local", registry.Env{Target: cfg, StateDir: stateDir, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	gs, err := grpcbridge.NewGRPCServer(grpcbridge.Transport{Insecure: true})
	if err != nil {
		return nil, err
	}
	grpcbridge.NewServer(d, grpcbridge.WithProviders("local")).Register(gs)
	l, err := grpcbridge.Listen(sock)
	if err != nil {
		return nil, err
	}
	go func() { _ = gs.Serve(l) }()
	return func() {
		gs.Stop()
		if c, ok := d.(interface{ Close() error }); ok {
			_ = c.Close()
		}
	}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitHealthy waits until the controller answers /readyz.
func waitHealthy(ctx context.Context, port int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			fmt.Fprintf(conn, "GET /readyz HTTP/1.0\r\n\r\n")
			line, _ := bufio.NewReader(conn).ReadString('\n')
			conn.Close()
			if strings.Contains(line, " 200 ") {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return errors.New("machinist run did not become ready within 2 minutes")
}

func createClass(ctx context.Context, c client.Client) error {
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bench"}, StringData: map[string]string{"userData": "#cloud-config\n"}}); err != nil {
		return err
	}
	return c.Create(ctx, &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Namespace: "default", Name: "bench"},
		Provider:     "local",
		ProviderSpec: kruntime.RawExtension{Raw: []byte(`{"cluster":"bench"}`)},
		SecretRef:    &corev1.SecretReference{Namespace: "default", Name: "bench"},
	})
}

func createDeployment(ctx context.Context, c client.Client, n int) error {
	surge, unavailable := intstr.FromInt(1), intstr.FromInt(0)
	return c.Create(ctx, &v1alpha1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bench"},
		Spec: v1alpha1.MachineDeploymentSpec{
			Replicas: int32(n),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "bench"}},
			Strategy: v1alpha1.MachineDeploymentStrategy{RollingUpdate: &v1alpha1.RollingUpdateMachineDeployment{
				UpdateConfiguration: v1alpha1.UpdateConfiguration{MaxSurge: &surge, MaxUnavailable: &unavailable}}},
			Template: v1alpha1.MachineTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"pool": "bench"}},
				Spec:       v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: "bench"}},
			},
		},
	})
}

// requestCounts reads apiserver_request_total from kube-apiserver's /metrics, summed by
// "resource verb" (resource with its subresource).
func requestCounts(ctx context.Context, cfg *rest.Config) (map[string]float64, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read kube-apiserver metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read kube-apiserver metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		end := strings.LastIndex(line, "}")
		labels := parseLabels(line[len("apiserver_request_total{"):end])
		v, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err != nil {
			continue
		}
		res := labels["resource"]
		if sub := labels["subresource"]; sub != "" {
			res += "/" + sub
		}
		if res == "" {
			res = "(non-resource)"
		}
		out[res+" "+labels["verb"]] += v
	}
	return out, sc.Err()
}

func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		eq := strings.Index(s, "=\"")
		if eq < 0 {
			break
		}
		key := s[:eq]
		rest := s[eq+2:]
		end := strings.Index(rest, "\"")
		if end < 0 {
			break
		}
		out[key] = rest[:end]
		s = strings.TrimPrefix(rest[end+1:], ",")
	}
	return out
}

// vmHWM returns a process's peak resident set size in bytes (0 when unknown).
func vmHWM(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// cpuTime returns a process's user+system CPU time so far (0 when unknown).
func cpuTime(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticks
}

func report(w io.Writer, r result) {
	fmt.Fprintf(w, "\n### Scale: one MachineDeployment of %d local machines\n\n", r.machines)
	fmt.Fprintf(w, "Command: `make bench-scale` (%s/%s, %d CPUs); controller flags: `%s`.\n\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), strings.Join(r.controllerArgs, " "))
	fmt.Fprintf(w, "| measure | value | target |\n|---|---|---|\n")
	fmt.Fprintf(w, "| first machine Running | %.1f s | |\n", r.firstRunning.Seconds())
	fmt.Fprintf(w, "| half Running | %.1f s | |\n", r.halfRunning.Seconds())
	fmt.Fprintf(w, "| all %d Running | %.1f s | ≤ 120 s |\n", r.machines, r.allRunning.Seconds())
	if r.providerRSS > 0 {
		fmt.Fprintf(w, "| controller peak RSS (VmHWM; the local provider runs in another process) | %.0f MiB | ≤ 300 MB |\n", float64(r.peakRSS)/(1<<20))
		fmt.Fprintf(w, "| controller CPU time | %.1f s | |\n", r.cpu.Seconds())
		fmt.Fprintf(w, "| local provider process (1000 node agents, gRPC server, benchmark) peak RSS / CPU | %.0f MiB / %.1f s | |\n", float64(r.providerRSS)/(1<<20), r.providerCPU.Seconds())
	} else {
		fmt.Fprintf(w, "| controller peak RSS (VmHWM, incl. the local provider's node agents) | %.0f MiB | ≤ 300 MB |\n", float64(r.peakRSS)/(1<<20))
		fmt.Fprintf(w, "| controller CPU time (incl. the node agents) | %.1f s | |\n", r.cpu.Seconds())
	}
	fmt.Fprintf(w, "| API requests (all clients) | %.0f (%.1f per machine) | |\n\n", r.totalRequests, r.totalRequests/float64(r.machines))
	keys := make([]string, 0, len(r.requests))
	for k := range r.requests {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return r.requests[keys[i]] > r.requests[keys[j]] })
	fmt.Fprintf(w, "| resource verb | requests | per machine |\n|---|---|---|\n")
	for _, k := range keys {
		if r.requests[k] < float64(r.machines)/100 {
			continue
		}
		fmt.Fprintf(w, "| %s | %.0f | %.2f |\n", k, r.requests[k], r.requests[k]/float64(r.machines))
	}
	fmt.Fprintln(w)
}
