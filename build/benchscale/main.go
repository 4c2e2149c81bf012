// Command benchscale is `make bench-scale` and `make bench-scale-growth`: for each size of
// --machines it starts a real etcd + kube-apiserver, runs `machinist run` as a child process
// with the local provider, creates one MachineDeployment of that many machines and measures how
// long until all are Running, the controller process's peak RSS and CPU time, and the API
// requests per machine (from kube-apiserver's apiserver_request_total, by resource and verb).
// Then it scales the same deployment to 0 and measures how long until every Machine, Node and
// VM is gone. It prints a Markdown section per size for docs/performance.md and, for more than
// one size, a growth table (CPU per machine should not grow with the fleet).
//
// The local provider's node agents (the "cloud" and the kubelets of this benchmark) run inside
// the controller process, so its RSS and CPU include the simulated nodes; their lease renewals
// and node status updates show up in the request counts under leases and nodes.
//
// --profile-dir turns on the controller's /debug/pprof (machinist run --profiling) and saves
// back-to-back CPU profiles of each phase there, and a heap profile once every machine is
// Running; `go tool pprof -top DIR/1000-up-*.pprof` merges a phase's CPU profiles.
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
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/internal/localcontrolplane"
	"github.com/machinist-io/machinist/internal/waitctx"
	_ "github.com/machinist-io/machinist/providers/local"
)

type config struct {
	machinist  string
	binDir     string
	timeout    time.Duration
	keep       bool
	separate   bool
	scaleDown  bool
	profileDir string
	extra      []string // more `machinist run` flags after --
}

func main() {
	var cfg config
	flag.StringVar(&cfg.machinist, "machinist", "bin/machinist", "the machinist binary to run")
	flag.StringVar(&cfg.binDir, "bin-dir", "", "directory with etcd and kube-apiserver (default: the repository's bin/)")
	sizes := flag.String("machines", "1000", "machines in the MachineDeployment; a comma-separated list (1000,3000,5000) runs each size in turn, each on a fresh control plane and controller, and ends with a growth table")
	flag.DurationVar(&cfg.timeout, "timeout", 15*time.Minute, "give up on a phase (scale-up, scale-down) after this long")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the temporary directories (logs, state) for inspection")
	flag.BoolVar(&cfg.separate, "separate-provider", false, "run the local provider in this process and serve it to the controller over the gRPC bridge (--driver-endpoint on a unix socket), so the controller's numbers are its own")
	flag.BoolVar(&cfg.scaleDown, "scale-down", true, "after all machines are Running, scale the deployment to 0 and measure until every Machine, Node and VM is gone")
	flag.StringVar(&cfg.profileDir, "profile-dir", "", "run the controller with --profiling and save CPU profiles of each phase here (SIZE-up-N.pprof, SIZE-down-N.pprof; `go tool pprof -top` merges several) and a heap profile with every machine Running (SIZE-heap.pprof)")
	flag.Parse()
	cfg.extra = flag.Args()

	ns, err := parseSizes(*sizes)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale: --machines:", err)
		os.Exit(2)
	}
	if cfg.profileDir != "" {
		if err := os.MkdirAll(cfg.profileDir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "bench-scale:", err)
			os.Exit(1)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var results []result
	for _, n := range ns {
		res, err := run(ctx, cfg, n)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench-scale: %d machines: %v\n", n, err)
			if len(results) > 0 {
				growth(os.Stdout, results)
			}
			stop()
			os.Exit(1)
		}
		report(os.Stdout, res)
		results = append(results, res)
	}
	if len(results) > 1 {
		growth(os.Stdout, results)
	}
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive machine count: use e.g. 1000 or 1000,3000,5000", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// phase is what one phase (scale-up or scale-down) cost.
type phase struct {
	wall          time.Duration
	cpu           time.Duration // controller CPU during the phase
	providerCPU   time.Duration // --separate-provider: this process's CPU during the phase
	requests      map[string]float64
	totalRequests float64
	load          loadStats
}

type result struct {
	machines       int
	firstRunning   time.Duration
	halfRunning    time.Duration
	up             phase
	down           *phase        // nil without --scale-down
	machinesGone   time.Duration // scale-down: until the last Machine is gone
	nodesGone      time.Duration // … the last Node
	vmsGone        time.Duration // … the last VM (the driver lists none)
	peakRSS        int64         // controller VmHWM at the end of the scale-up, bytes
	peakRSSDown    int64         // … at the end of the scale-down
	providerRSS    int64         // --separate-provider: this process's VmHWM
	controllerArgs []string
}

func run(ctx context.Context, cfg config, n int) (result, error) {
	res := result{machines: n}
	machinist, err := filepath.Abs(cfg.machinist)
	if err != nil {
		return res, err
	}
	dir, err := os.MkdirTemp("", "machinist-bench-")
	if err != nil {
		return res, err
	}
	if cfg.keep {
		fmt.Printf("keeping %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	log := slog.New(slog.DiscardHandler)
	fmt.Printf("== %d machines: starting etcd and kube-apiserver …\n", n)
	cp, err := localcontrolplane.Start(ctx, localcontrolplane.Options{Dir: filepath.Join(dir, "controlplane"), BinDir: cfg.binDir, Log: log})
	if err != nil {
		return res, err
	}
	defer cp.Stop()
	c, err := client.NewWithWatch(cp.Config, client.Options{Scheme: localcontrolplane.Scheme})
	if err != nil {
		return res, err
	}

	port, err := freePort()
	if err != nil {
		return res, err
	}
	extra := cfg.extra
	stateDir := filepath.Join(dir, "state")
	var vms driver.Driver // lists the VMs for the scale-down
	if cfg.separate {
		sock := "unix://" + filepath.Join(dir, "local.sock")
		d, stopProvider, err := serveLocal(cp.Config, filepath.Join(dir, "provider-state"), sock)
		if err != nil {
			return res, err
		}
		defer stopProvider()
		vms = d
		extra = append([]string{"--driver-endpoint", "local=" + sock, "--driver-insecure"}, extra...)
	}
	if cfg.profileDir != "" {
		extra = append([]string{"--profiling"}, extra...)
	}
	args := append([]string{"run",
		"--control-kubeconfig", cp.KubeconfigPath,
		"--state-dir", stateDir,
		"--leader-elect=false",
		"--address", "127.0.0.1", "--port", strconv.Itoa(port),
	}, extra...)
	res.controllerArgs = args[1:]
	logFile, err := os.Create(filepath.Join(dir, "machinist.log"))
	if err != nil {
		return res, err
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, machinist, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("start %s: %w", machinist, err)
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
	pid := cmd.Process.Pid
	fmt.Printf("machinist run (pid %d) %s\n", pid, strings.Join(args[1:], " "))
	if err := waitHealthy(ctx, port); err != nil {
		return res, fmt.Errorf("%w (log: %s)", err, logFile.Name())
	}
	if err := createClass(ctx, c); err != nil {
		return res, err
	}

	w := &watcher{c: c}
	if err := w.start(ctx); err != nil {
		return res, err
	}
	defer w.stop()

	prof := startProfiles(ctx, cfg.profileDir, port, fmt.Sprintf("%d-up", n))
	mark, err := begin(ctx, cp.Config, pid, cfg.separate)
	if err != nil {
		return res, err
	}
	start := time.Now()
	if err := createDeployment(ctx, c, n); err != nil {
		return res, err
	}
	fmt.Printf("created MachineDeployment bench with %d replicas\n", n)
	var peak int64
	err = w.until(ctx, cfg.timeout, func(s snapshot, tick bool) (bool, string) {
		el := time.Since(start)
		if s.running >= 1 && res.firstRunning == 0 {
			res.firstRunning = el
		}
		if s.running >= n/2 && res.halfRunning == 0 {
			res.halfRunning = el
		}
		if tick {
			peak = max(peak, vmHWM(pid))
			mark.sampleLoad()
		}
		return s.running >= n, fmt.Sprintf("[%6.1fs] machines %d, Running %d, controller RSS peak %.0f MiB, load %.1f",
			el.Seconds(), s.machines, s.running, float64(peak)/(1<<20), load1())
	})
	if err != nil {
		return res, fmt.Errorf("scale-up: %w (log: %s)", err, logFile.Name())
	}
	if res.up, err = mark.end(ctx); err != nil {
		return res, err
	}
	res.up.wall = time.Since(start)
	res.peakRSS = max(peak, vmHWM(pid))
	if cfg.separate {
		res.providerRSS = vmHWM(os.Getpid())
	}
	prof.stop()
	if cfg.profileDir != "" {
		// What the controller holds with every machine Running.
		path := filepath.Join(cfg.profileDir, fmt.Sprintf("%d-heap.pprof", n))
		if err := fetch(ctx, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap", port), path); err != nil {
			fmt.Fprintf(os.Stderr, "bench-scale: heap profile: %v\n", err)
		}
	}
	if !cfg.scaleDown {
		return res, nil
	}

	if vms == nil {
		// Another opener of the controller's state dir lists the VMs. Only now: the controller's
		// driver holds the state dir's host lock since its first machine, so it keeps hosting
		// the node agents.
		d, err := registry.Open("local", registry.Env{StateDir: stateDir, Log: log})
		if err != nil {
			return res, fmt.Errorf("open the local provider's state dir to list VMs: %w", err)
		}
		if cl, ok := d.(interface{ Close() error }); ok {
			defer cl.Close()
		}
		vms = d
	}
	prof = startProfiles(ctx, cfg.profileDir, port, fmt.Sprintf("%d-down", n))
	defer prof.stop()
	if mark, err = begin(ctx, cp.Config, pid, cfg.separate); err != nil {
		return res, err
	}
	start = time.Now()
	if err := scaleDeployment(ctx, c, 0); err != nil {
		return res, err
	}
	fmt.Printf("scaled MachineDeployment bench to 0\n")
	class := benchClass()
	vmCount := -1
	var lastVMList time.Time
	err = w.until(ctx, cfg.timeout, func(s snapshot, tick bool) (bool, string) {
		el := time.Since(start)
		if s.machines == 0 && res.machinesGone == 0 {
			res.machinesGone = el
		}
		if s.nodes == 0 && res.nodesGone == 0 {
			res.nodesGone = el
		}
		// Listing the VMs reads every record of the state dir: often only once the machines are
		// gone (their VMs went before their finalizers), else every 10 s for the progress line.
		if tick && vmCount != 0 && (s.machines == 0 || time.Since(lastVMList) >= 10*time.Second) {
			lastVMList = time.Now()
			if l, err := vms.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class}); err == nil {
				vmCount = len(l.MachineList)
				if vmCount == 0 {
					res.vmsGone = time.Since(start)
				}
			}
		}
		if tick {
			mark.sampleLoad()
		}
		return s.machines == 0 && s.nodes == 0 && vmCount == 0, fmt.Sprintf("[%6.1fs] machines %d, nodes %d, VMs %d (last listed), load %.1f",
			el.Seconds(), s.machines, s.nodes, vmCount, load1())
	})
	if err != nil {
		return res, fmt.Errorf("scale-down: %w (log: %s)", err, logFile.Name())
	}
	down, err := mark.end(ctx)
	if err != nil {
		return res, err
	}
	down.wall = time.Since(start)
	res.down = &down
	res.peakRSSDown = vmHWM(pid)
	return res, nil
}

// mark is the state of the measured processes at the start of a phase.
type mark struct {
	cfg      *rest.Config
	pid      int
	separate bool
	cpu      time.Duration
	ownCPU   time.Duration
	requests map[string]float64
	load     loadStats
}

func begin(ctx context.Context, cfg *rest.Config, pid int, separate bool) (*mark, error) {
	req, err := requestCounts(ctx, cfg)
	if err != nil {
		return nil, err
	}
	m := &mark{cfg: cfg, pid: pid, separate: separate, cpu: cpuTime(pid), ownCPU: cpuTime(os.Getpid()), requests: req}
	m.sampleLoad()
	return m, nil
}

func (m *mark) sampleLoad() { m.load.add(load1()) }

func (m *mark) end(ctx context.Context) (phase, error) {
	m.sampleLoad()
	p := phase{cpu: cpuTime(m.pid) - m.cpu, load: m.load, requests: map[string]float64{}}
	if m.separate {
		p.providerCPU = cpuTime(os.Getpid()) - m.ownCPU
	}
	after, err := requestCounts(ctx, m.cfg)
	if err != nil {
		return p, err
	}
	for k, v := range after {
		if d := v - m.requests[k]; d > 0 {
			p.requests[k] = d
			p.totalRequests += d
		}
	}
	return p, nil
}

// loadStats summarises the 1-minute load average sampled during a phase.
type loadStats struct {
	n         int
	sum, peak float64
}

func (l *loadStats) add(v float64) {
	if v < 0 {
		return
	}
	l.n++
	l.sum += v
	l.peak = max(l.peak, v)
}

func (l loadStats) String() string {
	if l.n == 0 {
		return "?"
	}
	return fmt.Sprintf("%.1f (max %.1f)", l.sum/float64(l.n), l.peak)
}

// load1 is the machine's 1-minute load average (-1 when unknown).
func load1() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// snapshot is what the watches show.
type snapshot struct{ machines, running, nodes int }

// watcher follows the machines' phases and the nodes through watches, counting incrementally
// (the benchmark shares the CPUs it measures).
type watcher struct {
	c client.WithWatch

	mu      sync.Mutex
	phases  map[string]v1alpha1.MachinePhase
	running int
	nodes   map[string]bool
	changed chan struct{}
	cancel  context.CancelFunc
	done    sync.WaitGroup
	err     error
}

func (w *watcher) start(ctx context.Context) error {
	w.phases, w.nodes, w.changed = map[string]v1alpha1.MachinePhase{}, map[string]bool{}, make(chan struct{}, 1)
	ctx, w.cancel = context.WithCancel(ctx)
	for _, follow := range []func(context.Context) error{w.followMachines, w.followNodes} {
		w.done.Add(1)
		go func() {
			defer w.done.Done()
			for ctx.Err() == nil {
				// The API server ends watches now and then: list again and resume.
				if err := follow(ctx); err != nil && ctx.Err() == nil {
					w.mu.Lock()
					w.err = err
					w.mu.Unlock()
					_ = waitctx.Sleep(ctx, clock.RealClock{}, time.Second) // then list again
				}
			}
		}()
	}
	return nil
}

func (w *watcher) stop() {
	w.cancel()
	w.done.Wait()
}

func (w *watcher) notify() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *watcher) setPhase(name string, p v1alpha1.MachinePhase, gone bool) {
	old, had := w.phases[name]
	if had && old == v1alpha1.MachineRunning {
		w.running--
	}
	if gone {
		delete(w.phases, name)
		return
	}
	w.phases[name] = p
	if p == v1alpha1.MachineRunning {
		w.running++
	}
}

func (w *watcher) followMachines(ctx context.Context) error {
	var list v1alpha1.MachineList
	if err := w.c.List(ctx, &list, client.InNamespace("default")); err != nil {
		return fmt.Errorf("list machines: %w", err)
	}
	w.mu.Lock()
	clear(w.phases)
	w.running = 0
	for _, m := range list.Items {
		w.setPhase(m.Name, m.Status.CurrentStatus.Phase, false)
	}
	w.mu.Unlock()
	w.notify()
	wi, err := w.c.Watch(ctx, &v1alpha1.MachineList{}, client.InNamespace("default"),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		return fmt.Errorf("watch machines: %w", err)
	}
	defer wi.Stop()
	for ev := range wi.ResultChan() {
		m, ok := ev.Object.(*v1alpha1.Machine)
		if !ok {
			continue
		}
		w.mu.Lock()
		w.setPhase(m.Name, m.Status.CurrentStatus.Phase, ev.Type == watch.Deleted)
		w.mu.Unlock()
		w.notify()
	}
	return nil
}

func (w *watcher) followNodes(ctx context.Context) error {
	var list corev1.NodeList
	if err := w.c.List(ctx, &list); err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	w.mu.Lock()
	clear(w.nodes)
	for _, n := range list.Items {
		w.nodes[n.Name] = true
	}
	w.mu.Unlock()
	w.notify()
	wi, err := w.c.Watch(ctx, &corev1.NodeList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		return fmt.Errorf("watch nodes: %w", err)
	}
	defer wi.Stop()
	for ev := range wi.ResultChan() {
		n, ok := ev.Object.(*corev1.Node)
		if !ok {
			continue
		}
		w.mu.Lock()
		if ev.Type == watch.Deleted {
			delete(w.nodes, n.Name)
		} else {
			w.nodes[n.Name] = true
		}
		w.mu.Unlock()
		w.notify()
	}
	return nil
}

// until calls check on every change and every second (tick) until it reports done, printing
// its progress line every 5 seconds.
// The expensive parts of check (reading /proc, listing VMs, sampling the load) belong in its
// tick calls, once a second.
func (w *watcher) until(ctx context.Context, timeout time.Duration, check func(s snapshot, tick bool) (bool, string)) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline := time.After(timeout)
	var lastReport time.Time
	var line string
	ticked := true
	for {
		w.mu.Lock()
		s := snapshot{machines: len(w.phases), running: w.running, nodes: len(w.nodes)}
		w.mu.Unlock()
		var done bool
		done, line = check(s, ticked)
		ticked = false
		if done {
			fmt.Println(line)
			return nil
		}
		if time.Since(lastReport) >= 5*time.Second {
			lastReport = time.Now()
			fmt.Println(line)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			w.mu.Lock()
			err := w.err
			w.mu.Unlock()
			return fmt.Errorf("not done after %s: %s (last watch error: %v)", timeout, line, err)
		case <-w.changed:
		case <-tick.C:
			ticked = true
		}
	}
}

// profiles saves back-to-back CPU profiles of the controller until stopped.
type profiles struct {
	stopping atomic.Bool
	cancel   context.CancelFunc
	done     chan struct{}
}

// profileChunk is the length of one CPU profile.
const profileChunk = 5 * time.Second

func startProfiles(ctx context.Context, dir string, port int, name string) *profiles {
	p := &profiles{done: make(chan struct{})}
	ctx, p.cancel = context.WithCancel(ctx)
	if dir == "" {
		close(p.done)
		return p
	}
	go func() {
		defer close(p.done)
		for i := 0; ctx.Err() == nil && !p.stopping.Load(); i++ {
			path := filepath.Join(dir, fmt.Sprintf("%s-%03d.pprof", name, i))
			if err := fetchProfile(ctx, port, path); err != nil && ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "bench-scale: CPU profile %s: %v\n", path, err)
				return
			}
		}
	}()
	return p
}

// stop lets the profile being taken complete (at most profileChunk: it covers the end of the
// phase, and the controller is not left profiling for a request that went away), then stops.
func (p *profiles) stop() {
	p.stopping.Store(true)
	select {
	case <-p.done:
	case <-time.After(profileChunk + 5*time.Second):
	}
	p.cancel()
	<-p.done
}

func fetchProfile(ctx context.Context, port int, path string) error {
	return fetch(ctx, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", port, int(profileChunk/time.Second)), path)
}

// fetch saves what url answers in path.
func fetch(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}

// serveLocal opens the local provider in this process (its node agents register Nodes in the
// control plane) and serves it over the gRPC bridge on a unix socket, as a slim provider sidecar
// would.
func serveLocal(cfg *rest.Config, stateDir, sock string) (driver.Driver, func(), error) {
	d, err := registry.Open("local", registry.Env{Target: cfg, StateDir: stateDir, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, nil, err
	}
	gs, err := grpcbridge.NewGRPCServer(grpcbridge.Transport{Insecure: true})
	if err != nil {
		return nil, nil, err
	}
	grpcbridge.NewServer(d, grpcbridge.WithProviders("local")).Register(gs)
	l, err := grpcbridge.Listen(sock)
	if err != nil {
		return nil, nil, err
	}
	go func() { _ = gs.Serve(l) }()
	return d, func() {
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
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err != nil {
			return false, nil
		}
		fmt.Fprintf(conn, "GET /readyz HTTP/1.0\r\n\r\n")
		line, _ := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		return strings.Contains(line, " 200 "), nil
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return errors.New("machinist run did not become ready within 2 minutes")
}

func benchClass() *v1alpha1.MachineClass {
	return &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Namespace: "default", Name: "bench"},
		Provider:     "local",
		ProviderSpec: kruntime.RawExtension{Raw: []byte(`{"cluster":"bench"}`)},
		SecretRef:    &corev1.SecretReference{Namespace: "default", Name: "bench"},
	}
}

func createClass(ctx context.Context, c client.Client) error {
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bench"}, StringData: map[string]string{"userData": "#cloud-config\n"}}); err != nil {
		return err
	}
	return c.Create(ctx, benchClass())
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

// scaleDeployment sets the deployment's replicas, as `kubectl scale` does.
func scaleDeployment(ctx context.Context, c client.Client, n int) error {
	d := &v1alpha1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bench"}}
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, n))
	if err := c.Patch(ctx, d, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		return fmt.Errorf("scale MachineDeployment bench to %d: %w", n, err)
	}
	return nil
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

// heartbeats are the requests the node agents make periodically whatever the machine count
// does: lease renewals. They grow with the run's wall time (one per node per 10 s).
const heartbeats = "leases PUT"

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func report(w io.Writer, r result) {
	n := float64(r.machines)
	fmt.Fprintf(w, "\n### Scale: one MachineDeployment of %d local machines\n\n", r.machines)
	fmt.Fprintf(w, "Command: `make bench-scale` (%s/%s, %d CPUs); controller flags: `%s`.\n\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), strings.Join(r.controllerArgs, " "))
	fmt.Fprintf(w, "| measure | value |\n|---|---|\n")
	fmt.Fprintf(w, "| first machine Running | %.1f s |\n", r.firstRunning.Seconds())
	fmt.Fprintf(w, "| half Running | %.1f s |\n", r.halfRunning.Seconds())
	fmt.Fprintf(w, "| all %d Running | %.1f s |\n", r.machines, r.up.wall.Seconds())
	fmt.Fprintf(w, "| load average (1 min) during the scale-up | %s |\n", r.up.load)
	if r.providerRSS > 0 {
		fmt.Fprintf(w, "| controller peak RSS (VmHWM; the local provider runs in another process) | %.0f MiB |\n", mib(r.peakRSS))
		fmt.Fprintf(w, "| controller CPU time during the scale-up | %.1f s (%.1f ms per machine) |\n", r.up.cpu.Seconds(), r.up.cpu.Seconds()*1000/n)
		fmt.Fprintf(w, "| local provider process (node agents, gRPC server, benchmark) peak RSS / CPU | %.0f MiB / %.1f s |\n", mib(r.providerRSS), r.up.providerCPU.Seconds())
	} else {
		fmt.Fprintf(w, "| controller peak RSS (VmHWM, incl. the local provider's node agents) | %.0f MiB |\n", mib(r.peakRSS))
		fmt.Fprintf(w, "| controller CPU time during the scale-up (incl. the node agents) | %.1f s (%.1f ms per machine) |\n", r.up.cpu.Seconds(), r.up.cpu.Seconds()*1000/n)
	}
	fmt.Fprintf(w, "| API requests during the scale-up (all clients) | %.0f (%.1f per machine; %.1f without lease renewals) |\n",
		r.up.totalRequests, r.up.totalRequests/n, (r.up.totalRequests-r.up.requests[heartbeats])/n)
	if d := r.down; d != nil {
		fmt.Fprintf(w, "| scale-down to 0: every Machine / Node / VM gone | %.1f s / %.1f s / %.1f s |\n", r.machinesGone.Seconds(), r.nodesGone.Seconds(), r.vmsGone.Seconds())
		fmt.Fprintf(w, "| scale-down: controller CPU, API requests | %.1f s (%.1f ms per machine), %.1f per machine |\n", d.cpu.Seconds(), d.cpu.Seconds()*1000/n, d.totalRequests/n)
		fmt.Fprintf(w, "| load average (1 min) during the scale-down | %s |\n", d.load)
		fmt.Fprintf(w, "| controller peak RSS at the end | %.0f MiB |\n", mib(r.peakRSSDown))
	}
	fmt.Fprintln(w)
	requestTable(w, "scale-up", r.up, n)
	if r.down != nil {
		requestTable(w, "scale-down", *r.down, n)
	}
}

func requestTable(w io.Writer, name string, p phase, n float64) {
	keys := make([]string, 0, len(p.requests))
	for k := range p.requests {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return p.requests[keys[i]] > p.requests[keys[j]] })
	fmt.Fprintf(w, "| %s: resource verb | requests | per machine |\n|---|---|---|\n", name)
	for _, k := range keys {
		if p.requests[k] < n/100 {
			continue
		}
		fmt.Fprintf(w, "| %s | %.0f | %.2f |\n", k, p.requests[k], p.requests[k]/n)
	}
	fmt.Fprintln(w)
}

// growth prints one row per size and how the CPU per machine compares with the first size.
func growth(w io.Writer, rs []result) {
	fmt.Fprintf(w, "\n### Growth: one MachineDeployment of %s local machines, one after the other\n\n", sizesOf(rs))
	fmt.Fprintf(w, "| machines | all Running | controller CPU | CPU per machine | vs %d | peak RSS (controller + node agents) | API requests per machine (without lease renewals) | scale-down to 0 | load average up / down |\n", rs[0].machines)
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|\n")
	base := rs[0].up.cpu.Seconds() / float64(rs[0].machines)
	for _, r := range rs {
		n := float64(r.machines)
		per := r.up.cpu.Seconds() / n
		rss := r.peakRSS + r.providerRSS
		down, downLoad := "—", "—"
		if r.down != nil {
			down = fmt.Sprintf("%.1f s", max(r.machinesGone, r.nodesGone, r.vmsGone).Seconds())
			downLoad = r.down.load.String()
		}
		ratio := "—"
		if base > 0 {
			ratio = fmt.Sprintf("%+.0f %%", (per/base-1)*100)
		}
		fmt.Fprintf(w, "| %d | %.1f s | %.1f s | %.1f ms | %s | %.0f MiB | %.1f (%.1f) | %s | %s / %s |\n",
			r.machines, r.up.wall.Seconds(), r.up.cpu.Seconds(), per*1000, ratio, mib(rss),
			r.up.totalRequests/n, (r.up.totalRequests-r.up.requests[heartbeats])/n, down, r.up.load, downLoad)
	}
	fmt.Fprintln(w)
}

func sizesOf(rs []result) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = strconv.Itoa(r.machines)
	}
	return strings.Join(parts, ", ")
}
