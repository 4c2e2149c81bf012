// Command benchscale is `make bench-scale` and `make bench-scale-growth`: for each size of
// --machines it starts a real etcd + kube-apiserver, runs `machinist run` as a child process
// with the local provider, creates one MachineDeployment of that many machines and measures how
// long until all are Running, the CPU time and peak RSS of the controller and of the provider,
// and the API requests per machine (from kube-apiserver's apiserver_request_total, by resource
// and verb). Then it scales the same deployment to 0 and measures how long until every Machine,
// Node and VM is gone. It prints a Markdown section per size for docs/performance.md and, for
// more than one size, a growth table (CPU per machine should not grow with the fleet).
//
// Where the local provider runs (--provider):
//
//   - exec (default): the slim provider binary bin/machinist-local, a child of the controller
//     (`machinist run --driver-exec local=…`), so the controller's CPU and RSS are its own and
//     the node agents' (the "kubelets" and the "cloud" of this benchmark) are measured apart;
//   - compiled-in: inside the controller process, whose numbers then include the node agents;
//   - bench: inside this process, served to the controller over the gRPC bridge on a unix socket
//     (--driver-endpoint).
//
// --deployments N shares the machines of each size evenly among N MachineDeployments, created
// and scaled together: the same fleet in breadth (500 deployments of 2 against one of 1000).
//
// --faults (with --provider exec) kills, in each phase, the provider child twice and the
// controller once (faults.go) and checks that nothing is lost: Machines = Nodes = VMs at the end
// of the scale-up, none after the scale-down, and it reports the machines seen Unknown.
//
// --profile-dir turns on the controller's /debug/pprof (machinist run --profiling) and saves
// back-to-back CPU profiles of each phase there, and a heap profile once every machine is
// Running; `go tool pprof -top DIR/1000-up-*.pprof` merges a phase's CPU profiles.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/harness/localcontrolplane"
	_ "github.com/machinist-io/machinist/providers/local"
)

// Where the local provider runs.
const (
	providerExec       = "exec"
	providerCompiledIn = "compiled-in"
	providerBench      = "bench"
)

type config struct {
	machinist  string
	slim       string // the slim local provider binary (--provider exec)
	binDir     string
	timeout    time.Duration
	keep       bool
	provider   string
	faults     bool
	kcm        bool
	scaleDown  bool
	profileDir string
	// deployments shares the machines among that many MachineDeployments (1: one "bench").
	deployments int
	extra       []string // more `machinist run` flags after --
}

func main() {
	var cfg config
	flag.StringVar(&cfg.machinist, "machinist", "bin/machinist", "the machinist binary to run")
	flag.StringVar(&cfg.slim, "provider-binary", "", "the slim local provider binary --provider exec runs (default: machinist-local beside --machinist)")
	flag.StringVar(&cfg.binDir, "bin-dir", "", "directory with etcd and kube-apiserver (default: the repository's bin/)")
	sizes := flag.String("machines", "1000", "machines in the MachineDeployment; a comma-separated list (1000,3000,5000) runs each size in turn, each on a fresh control plane and controller, and ends with a growth table")
	flag.DurationVar(&cfg.timeout, "timeout", 15*time.Minute, "give up on a phase (scale-up, scale-down) after this long")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the temporary directories (logs, state) for inspection")
	flag.StringVar(&cfg.provider, "provider", providerExec, "where the local provider and its node agents run: exec (a slim child process of the controller, --driver-exec: the controller's numbers are its own), compiled-in (inside the controller: its numbers include the node agents) or bench (in this process, over the gRPC bridge)")
	flag.BoolVar(&cfg.faults, "faults", false, "in each phase kill the provider child at 20 % and 70 % and the controller at 45 % (SIGKILL; the controller is restarted at once); needs --provider exec")
	flag.BoolVar(&cfg.kcm, "kube-controller-manager", false, "also run kube-controller-manager (bin/), whose node lifecycle controller marks a node Unknown when its Lease is older than its grace period (50 s), and the Machine controller its machine after it: what stale node agents cost in a real cluster")
	flag.BoolVar(&cfg.scaleDown, "scale-down", true, "after all machines are Running, scale the deployment to 0 and measure until every Machine, Node and VM is gone")
	flag.IntVar(&cfg.deployments, "deployments", 1, "share the machines evenly among this many MachineDeployments (bench-000, …), created together and scaled together: a fleet in breadth (500 deployments of 2) against one deployment of the same size")
	flag.StringVar(&cfg.profileDir, "profile-dir", "", "run the controller with --profiling and save CPU profiles of each phase here (SIZE-up-N.pprof, SIZE-down-N.pprof; `go tool pprof -top` merges several) and a heap profile with every machine Running (SIZE-heap.pprof)")
	flag.Parse()
	cfg.extra = flag.Args()

	if err := cfg.check(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale:", err)
		os.Exit(2)
	}
	ns, err := parseSizes(*sizes, cfg.deployments)
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
	if err := runSizes(cfg, ns); err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale:", err)
		os.Exit(1)
	}
}

// runSizes runs and reports each size in turn, then the growth table; a failed size ends the
// run, after the growth table of the sizes before it.
func runSizes(cfg config, ns []int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var results []result
	for _, n := range ns {
		res, err := run(ctx, cfg, n)
		if err != nil {
			if len(results) > 0 {
				growth(os.Stdout, results)
			}
			return fmt.Errorf("%d machines: %w", n, err)
		}
		report(os.Stdout, res)
		results = append(results, res)
	}
	if len(results) > 1 {
		growth(os.Stdout, results)
	}
	return nil
}

func (cfg *config) check() error {
	switch cfg.provider {
	case providerExec:
		if cfg.slim == "" {
			cfg.slim = filepath.Join(filepath.Dir(cfg.machinist), "machinist-local")
		}
		if _, err := os.Stat(cfg.slim); err != nil {
			return fmt.Errorf("--provider exec runs the slim local provider %s: %w (build it with `make build`, or name it with --provider-binary)", cfg.slim, err)
		}
	case providerCompiledIn, providerBench:
	default:
		return fmt.Errorf("--provider %q: use exec, compiled-in or bench", cfg.provider)
	}
	if cfg.faults && cfg.provider != providerExec {
		return fmt.Errorf("--faults kills the provider's own process: use it with --provider exec")
	}
	return nil
}

func parseSizes(s string, deployments int) ([]int, error) {
	if deployments < 1 {
		return nil, fmt.Errorf("--deployments %d: want 1 or more", deployments)
	}
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive machine count: use e.g. 1000 or 1000,3000,5000", f)
		}
		if n%deployments != 0 {
			return nil, fmt.Errorf("%d machines do not share evenly among --deployments %d: use a multiple of it", n, deployments)
		}
		out = append(out, n)
	}
	return out, nil
}

// phase is what one phase (scale-up or scale-down) cost.
type phase struct {
	wall          time.Duration
	cpu           time.Duration // the controller's own CPU during the phase, over all its processes
	providerCPU   time.Duration // the provider's (exec: its child processes; bench: this process)
	requests      map[string]float64
	totalRequests float64
	reconciles    map[string]float64 // by controller
	load          loadStats
	unknown       int           // machines seen Unknown during the phase
	oldestLease   time.Duration // the oldest node Lease seen during the phase (sampled every 5 s)
	faults        int           // kills during the phase
	// What the end of the phase shows: machines, nodes, VMs (the driver's list).
	machines, nodes, vms int
}

type result struct {
	machines       int
	deployments    int
	provider       string
	firstRunning   time.Duration
	halfRunning    time.Duration
	up             phase
	down           *phase        // nil without --scale-down
	machinesGone   time.Duration // scale-down: until the last Machine is gone
	nodesGone      time.Duration // … the last Node
	vmsGone        time.Duration // … the last VM (the driver lists none)
	peakRSS        int64         // controller VmHWM at the end of the scale-up, bytes
	peakRSSDown    int64         // … at the end of the scale-down
	providerRSS    int64         // the provider process's VmHWM (exec, bench)
	deleteEvents   int           // SuccessfulDelete events stored after the scale-down
	deletedInNotes int           // machines those events name as deleted
	rejected       int           // events the API server refused (controller log)
	freezes        int           // overshoot freezes (controller log)
	controllerArgs []string
}

func run(ctx context.Context, cfg config, n int) (result, error) {
	res := result{machines: n, deployments: cfg.deployments, provider: cfg.provider}
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
	cpOpts := localcontrolplane.Options{Dir: filepath.Join(dir, "controlplane"), BinDir: cfg.binDir, Log: log, KubeControllerManager: cfg.kcm}
	if cfg.kcm {
		// On a loaded machine the default 10 s renew deadline is missed now and then, and a
		// kube-controller-manager that loses its lease exits: give it room.
		cpOpts.ControllerManagerArgs = []string{"--leader-elect-lease-duration=60s", "--leader-elect-renew-deadline=50s", "--leader-elect-retry-period=5s"}
	}
	cp, err := localcontrolplane.Start(ctx, cpOpts)
	if err != nil {
		return res, err
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "bench-scale: stop the control plane:", err)
		}
	}()
	c, err := client.NewWithWatch(cp.Config, client.Options{Scheme: localcontrolplane.Scheme})
	if err != nil {
		return res, err
	}

	port, err := freePort()
	if err != nil {
		return res, err
	}
	extra := cfg.extra
	env := os.Environ()
	stateDir := filepath.Join(dir, "state") // the controller's (compiled-in drivers)
	vmState := stateDir                     // where the local provider keeps its machines
	var vms driver.Driver                   // lists the VMs
	switch cfg.provider {
	case providerBench:
		sock := "unix://" + filepath.Join(dir, "local.sock")
		d, stopProvider, err := serveLocal(cp.Config, filepath.Join(dir, "provider-state"), sock)
		if err != nil {
			return res, err
		}
		defer stopProvider()
		vms = d
		extra = append([]string{"--driver-endpoint", "local=" + sock, "--driver-insecure"}, extra...)
	case providerExec:
		// The child inherits the controller's environment: serve reads its target cluster and
		// state dir from it.
		vmState = filepath.Join(dir, "provider-state")
		env = append(env, "TARGET_KUBECONFIG="+cp.KubeconfigPath, "MACHINIST_STATE_DIR="+vmState)
		slim, err := filepath.Abs(cfg.slim)
		if err != nil {
			return res, err
		}
		extra = append([]string{"--driver-exec", "local=" + slim}, extra...)
	}
	// openVMLister opens the local provider on vmState in this process, without a target
	// cluster: it lists VMs and never hosts the node agents while the provider wants them.
	openVMLister := func() (driver.Driver, func(), error) {
		d, err := registry.Open("local", registry.Env{StateDir: vmState, Log: log})
		if err != nil {
			return nil, nil, fmt.Errorf("open the local provider's state dir to list VMs: %w", err)
		}
		closer := func() {
			if cl, ok := d.(interface{ Close() error }); ok {
				_ = cl.Close()
			}
		}
		return d, closer, nil
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
	logPath := filepath.Join(dir, "machinist.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return res, err
	}
	defer logFile.Close()
	ctl := &controllerProc{bin: machinist, args: args, env: env, log: logFile, port: port}
	if err := ctl.start(ctx); err != nil {
		ctl.stop()
		return res, fmt.Errorf("%w (log: %s)", err, logPath)
	}
	defer ctl.stop()
	fmt.Printf("machinist run (pid %d) %s\n", ctl.pid(), strings.Join(args[1:], " "))
	if err := createClass(ctx, c); err != nil {
		return res, err
	}

	w := &watcher{c: c}
	if err := w.start(ctx); err != nil {
		return res, err
	}
	defer w.stop()

	m := &meters{cfg: cp.Config, c: c, ctl: ctl, provider: cfg.provider, controller: newMeter(), child: newMeter()}
	inject := func() *injector {
		if !cfg.faults {
			return nil
		}
		return &injector{plan: faultPlan(), ctl: ctl, controller: m.controller, provider: m.child, log: func(format string, args ...any) {
			fmt.Printf(format+"\n", args...)
		}}
	}
	prof := startProfiles(ctx, cfg.profileDir, port, fmt.Sprintf("%d-up", n))
	mark, err := m.begin(ctx)
	if err != nil {
		return res, err
	}
	w.resetUnknown()
	start := time.Now()
	if err := createDeployments(ctx, c, n, cfg.deployments); err != nil {
		return res, err
	}
	fmt.Printf("created %d MachineDeployment(s) with %d machines in all\n", cfg.deployments, n)
	faults := inject()
	var last snapshot
	err = w.until(ctx, cfg.timeout, func(s snapshot, tick bool) (bool, string, error) {
		last = s
		el := time.Since(start)
		if s.running >= 1 && res.firstRunning == 0 {
			res.firstRunning = el
		}
		if s.running >= n/2 && res.halfRunning == 0 {
			res.halfRunning = el
		}
		if tick {
			m.sample()
			mark.sampleLoad()
			mark.sampleLeases(ctx, w.hasNode)
		}
		if faults != nil {
			if err := faults.progress(ctx, float64(s.running)/float64(n)); err != nil {
				return false, "", err
			}
		}
		return s.running >= n, fmt.Sprintf("[%6.1fs] machines %d, Running %d, Unknown so far %d, controller RSS peak %.0f MiB, load %.1f",
			el.Seconds(), s.machines, s.running, s.unknown, mib(m.controller.peakRSS()), load1()), nil
	})
	if err != nil {
		return res, fmt.Errorf("scale-up: %w (log: %s)", err, logPath)
	}
	if res.up, err = mark.end(ctx); err != nil {
		return res, err
	}
	res.up.wall = time.Since(start)
	res.up.unknown = last.unknown
	res.up.faults = countDone(faults)
	res.peakRSS = m.controller.peakRSS()
	prof.stop()
	if cfg.profileDir != "" {
		// What the controller holds with every machine Running.
		path := filepath.Join(cfg.profileDir, fmt.Sprintf("%d-heap.pprof", n))
		if err := fetch(ctx, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap", port), path); err != nil {
			fmt.Fprintf(os.Stderr, "bench-scale: heap profile: %v\n", err)
		}
	}
	if vms == nil {
		// Another opener of the provider's state dir lists the VMs. Only now: the provider holds
		// the state dir's host lock since its first machine, so it keeps hosting the node agents.
		d, closeVMs, err := openVMLister()
		if err != nil {
			return res, err
		}
		defer closeVMs()
		vms = d
	}
	class := benchClass()
	countVMs := func() (int, error) {
		l, err := vms.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class})
		if err != nil {
			return 0, err
		}
		return len(l.MachineList), nil
	}
	if res.up.vms, err = countVMs(); err != nil {
		return res, err
	}
	res.up.machines, res.up.nodes = last.machines, last.nodes
	if res.up.machines != n || res.up.nodes != n || res.up.vms != n {
		return res, fmt.Errorf("after the scale-up: %d machines, %d nodes, %d VMs; want %d of each (log: %s)", res.up.machines, res.up.nodes, res.up.vms, n, logPath)
	}
	if !cfg.scaleDown {
		res.rejected, res.freezes = scanLog(logPath)
		return res, nil
	}

	prof = startProfiles(ctx, cfg.profileDir, port, fmt.Sprintf("%d-down", n))
	defer prof.stop()
	if mark, err = m.begin(ctx); err != nil {
		return res, err
	}
	w.resetUnknown()
	start = time.Now()
	if err := scaleDeployments(ctx, c, cfg.deployments, 0); err != nil {
		return res, err
	}
	fmt.Printf("scaled %d MachineDeployment(s) to 0\n", cfg.deployments)
	faults = inject()
	vmCount := -1
	var lastVMList time.Time
	err = w.until(ctx, cfg.timeout, func(s snapshot, tick bool) (bool, string, error) {
		last = s
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
			if v, err := countVMs(); err == nil {
				vmCount = v
				if vmCount == 0 {
					res.vmsGone = time.Since(start)
				}
			}
		}
		if tick {
			m.sample()
			mark.sampleLoad()
			mark.sampleLeases(ctx, w.hasNode)
		}
		if faults != nil {
			if err := faults.progress(ctx, float64(n-s.machines)/float64(n)); err != nil {
				return false, "", err
			}
		}
		return s.machines == 0 && s.nodes == 0 && vmCount == 0, fmt.Sprintf("[%6.1fs] machines %d, nodes %d, VMs %d (last listed), Unknown so far %d, load %.1f",
			el.Seconds(), s.machines, s.nodes, vmCount, s.unknown, load1()), nil
	})
	if err != nil {
		return res, fmt.Errorf("scale-down: %w (log: %s)", err, logPath)
	}
	down, err := mark.end(ctx)
	if err != nil {
		return res, err
	}
	down.wall = time.Since(start)
	down.unknown = last.unknown
	down.faults = countDone(faults)
	down.machines, down.nodes, down.vms = last.machines, last.nodes, vmCount
	res.down = &down
	res.peakRSSDown = m.controller.peakRSS()
	res.providerRSS = m.providerRSS()
	if res.deleteEvents, res.deletedInNotes, err = deleteEvents(ctx, c); err != nil {
		return res, err
	}
	res.rejected, res.freezes = scanLog(logPath)
	return res, nil
}

func countDone(faults *injector) int {
	if faults == nil {
		return 0
	}
	n := 0
	for _, f := range faults.plan {
		if f.done {
			n++
		}
	}
	return n
}

// meters samples the controller's and the provider's processes once a second.
type meters struct {
	cfg        *rest.Config
	c          client.Client
	ctl        *controllerProc
	provider   string
	controller *meter // the controller's processes (their own CPU: children excluded)
	child      *meter // --provider exec: the provider child processes
}

func (m *meters) sample() {
	pid := m.ctl.pid()
	m.controller.sample(pid)
	if m.provider == providerExec {
		m.child.sample(childOf(pid))
	}
}

// providerCPU is the provider's CPU so far: its child processes', or this process's when the
// provider runs here (with the benchmark's own watches), 0 when it runs in the controller.
func (m *meters) providerCPU() time.Duration {
	switch m.provider {
	case providerExec:
		return m.child.total()
	case providerBench:
		return cpuTime(os.Getpid())
	}
	return 0
}

func (m *meters) providerRSS() int64 {
	switch m.provider {
	case providerExec:
		return m.child.peakRSS()
	case providerBench:
		return vmHWM(os.Getpid())
	}
	return 0
}

// mark is the state of the measured processes at the start of a phase.
type mark struct {
	m           *meters
	cpu         time.Duration
	providerCPU time.Duration
	requests    map[string]float64
	reconciles  map[string]float64
	load        loadStats
	leasesAt    time.Time     // last Lease sample
	oldestLease time.Duration // the oldest Lease seen
}

func (m *meters) begin(ctx context.Context) (*mark, error) {
	req, err := requestCounts(ctx, m.cfg)
	if err != nil {
		return nil, err
	}
	rec, err := reconcileCounts(ctx, m.ctl.port)
	if err != nil {
		return nil, err
	}
	m.sample()
	mk := &mark{m: m, cpu: m.controller.total(), providerCPU: m.providerCPU(), requests: req, reconciles: rec}
	mk.sampleLoad()
	return mk, nil
}

func (mk *mark) sampleLoad() { mk.load.add(load1()) }

// sampleLeases looks at the node Leases every 5 seconds (a list of every Lease: not more often
// on the machine it measures).
func (mk *mark) sampleLeases(ctx context.Context, node func(string) bool) {
	if time.Since(mk.leasesAt) < 5*time.Second {
		return
	}
	mk.leasesAt = time.Now()
	if age, err := oldestLease(ctx, mk.m.c, node); err == nil {
		mk.oldestLease = max(mk.oldestLease, age)
	}
}

func (mk *mark) end(ctx context.Context) (phase, error) {
	mk.sampleLoad()
	mk.m.sample()
	p := phase{cpu: mk.m.controller.total() - mk.cpu, providerCPU: mk.m.providerCPU() - mk.providerCPU, load: mk.load, oldestLease: mk.oldestLease, requests: map[string]float64{}}
	after, err := requestCounts(ctx, mk.m.cfg)
	if err != nil {
		return p, err
	}
	for k, v := range after {
		if d := v - mk.requests[k]; d > 0 {
			p.requests[k] = d
			p.totalRequests += d
		}
	}
	p.reconciles = map[string]float64{}
	rec, err := reconcileCounts(ctx, mk.m.ctl.port)
	if err != nil { // a controller restarted by --faults may not serve yet: the table stays empty
		fmt.Fprintf(os.Stderr, "bench-scale: reconcile counts: %v\n", err)
		return p, nil
	}
	for k, v := range rec {
		if d := v - mk.reconciles[k]; d > 0 { // a restarted controller (--faults) counts from 0
			p.reconciles[k] = d
		}
	}
	return p, nil
}

// scanLog counts, in the controller's log (every incarnation), the events the API server
// refused and the overshoot freezes.
func scanLog(path string) (rejected, freezes int) {
	f, err := os.Open(path)
	if err != nil {
		return -1, -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := strings.ToLower(sc.Text())
		if strings.Contains(line, "rejected event") {
			rejected++
		}
		if strings.Contains(line, "froze overshooting") {
			freezes++
		}
	}
	return rejected, freezes
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
