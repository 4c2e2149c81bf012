// Package localcontrolplane runs a real Kubernetes control plane — the pinned etcd and
// kube-apiserver that `make tools` builds into bin/ — on loopback, installs machinist's CRDs and
// hands out a rest.Config. It is product code: `machinist dev` (make run) and `machinist
// controlplane` run it, and build/benchscale measures on it; tests use it through harness/testenv,
// which adds what only tests need (testing.TB). Its certificates come from internal/pki.
//
// On request it also runs kube-scheduler and kube-controller-manager, built from the same pinned
// module, so Deployments, DaemonSets, Jobs, disruption budgets, pod garbage collection and node
// lifecycle work as in a real cluster. No kubelet runs: nodes, and the pods bound to them, come
// from the local provider's node agents.
package localcontrolplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Options configure a control plane. The zero value is a throw-away control plane in a new
// temporary directory with the repository's CRDs installed.
type Options struct {
	// BinDir holds the etcd and kube-apiserver binaries. Empty means $KUBEBUILDER_ASSETS, then
	// the bin/ directory of the repository containing the working directory.
	BinDir string
	// Dir keeps etcd's data, the certificates, the kubeconfig and the process logs. Empty means a
	// new temporary directory, removed by Stop. A Dir that already holds a control plane is
	// reused: same data, certificates and (when free) ports.
	Dir string
	// CRDDirs are directories of CustomResourceDefinition YAML files to install. Nil means the
	// repository's kubernetes/crds; an empty non-nil slice installs none.
	CRDDirs []string
	// APIServerArgs are extra kube-apiserver flags ("--flag=value"), appended after the defaults.
	APIServerArgs []string
	// KubeScheduler also runs kube-scheduler from BinDir.
	KubeScheduler bool
	// KubeControllerManager also runs kube-controller-manager from BinDir, and turns on the
	// ServiceAccount admission plugin (its controllers create the service accounts pods need).
	KubeControllerManager bool
	// SchedulerArgs and ControllerManagerArgs are extra flags of those components, e.g.
	// "--node-monitor-grace-period=10s".
	SchedulerArgs         []string
	ControllerManagerArgs []string
	// StartTimeout bounds the start of each process. Zero means 3 minutes (a cold start on a
	// busy 2-core machine takes well under one).
	StartTimeout time.Duration
	// QPS and Burst of the returned rest.Config. Zero means 1000 and 2000: controllers and the
	// local provider's node agents for 1000 machines share one config.
	QPS   float32
	Burst int
	// Log receives progress messages; nil means slog.Default().
	Log *slog.Logger
}

// ControlPlane is a running etcd and kube-apiserver, and kube-scheduler and
// kube-controller-manager when asked for.
type ControlPlane struct {
	// Config reaches the API server as a cluster admin (group system:masters).
	Config *rest.Config
	// KubeconfigPath is a kubeconfig file for Config, usable with kubectl.
	KubeconfigPath string
	// Dir is the directory holding data, certificates and logs.
	Dir string
	// APIServerPort is the kube-apiserver's secure port on 127.0.0.1; it does not change when
	// the API server is stopped and started again.
	APIServerPort int

	opts      Options
	log       *slog.Logger
	tempDir   bool
	certs     *certDir
	etcd      *process
	apiserver *process
	// scheduler and controllerManager are nil unless requested.
	scheduler         *process
	controllerManager *process
	stopOnce          sync.Once
	stopErr           error
}

// ports are remembered in <Dir>/ports.json so a persistent control plane restarts on the same
// address and its kubeconfig stays valid.
type ports struct {
	EtcdClient int `json:"etcdClient"`
	EtcdPeer   int `json:"etcdPeer"`
	APIServer  int `json:"apiServer"`
}

// Start starts etcd and kube-apiserver, waits until the API server is ready and
// installs the CRDs. Stop it with Stop. ctx bounds only the start.
func Start(ctx context.Context, opts Options) (_ *ControlPlane, err error) {
	cp := &ControlPlane{opts: opts, log: opts.Log}
	if cp.log == nil {
		cp.log = slog.Default()
	}
	if cp.opts.StartTimeout == 0 {
		cp.opts.StartTimeout = 3 * time.Minute
	}
	binDir, err := findBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	if err := cp.checkComponentBinaries(binDir); err != nil {
		return nil, err
	}
	crdDirs := opts.CRDDirs
	if crdDirs == nil {
		root, err := RepoRoot()
		if err != nil {
			return nil, fmt.Errorf("controlplane: locate the CRDs (or set Options.CRDDirs): %w", err)
		}
		crdDirs = []string{filepath.Join(root, "kubernetes", "crds")}
	}

	cp.Dir = opts.Dir
	if cp.Dir == "" {
		if cp.Dir, err = os.MkdirTemp("", "machinist-testenv-"); err != nil {
			return nil, fmt.Errorf("controlplane: %w", err)
		}
		cp.tempDir = true
	} else if err := os.MkdirAll(cp.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, cp.Stop())
		}
	}()
	if cp.certs, err = loadOrCreateCerts(filepath.Join(cp.Dir, "pki")); err != nil {
		return nil, err
	}

	// A port picked free can be taken before the process binds it; pick again a few times.
	for attempt := 0; ; attempt++ {
		p, err := cp.choosePorts(attempt > 0)
		if err != nil {
			return nil, err
		}
		cp.APIServerPort = p.APIServer
		cp.etcd = &process{
			name:    "etcd",
			path:    filepath.Join(binDir, "etcd"),
			args:    cp.etcdArgs(p),
			logFile: filepath.Join(cp.Dir, "etcd.log"),
		}
		cp.apiserver = &process{
			name:    "kube-apiserver",
			path:    filepath.Join(binDir, "kube-apiserver"),
			args:    cp.apiserverArgs(p),
			logFile: filepath.Join(cp.Dir, "kube-apiserver.log"),
		}
		if err = cp.startAll(ctx); err == nil {
			break
		}
		if !errors.Is(err, errAddrInUse) || attempt == 2 {
			return nil, err
		}
		cp.log.Info("controlplane: a port was taken, retrying with new ports", "error", err)
	}

	if err := cp.writeKubeconfig(); err != nil {
		return nil, err
	}
	if err := installCRDs(ctx, cp.Config, crdDirs, cp.opts.StartTimeout); err != nil {
		return nil, err
	}
	if err := cp.startComponents(ctx, binDir); err != nil {
		return nil, err
	}
	return cp, nil
}

func (cp *ControlPlane) startAll(ctx context.Context) error {
	start := time.Now()
	cp.log.Info("controlplane: starting etcd", "dir", cp.Dir)
	if err := cp.etcd.start(); err != nil {
		return err
	}
	if err := cp.waitEtcd(ctx); err != nil {
		cp.etcd.stop(5 * time.Second)
		return err
	}
	cp.Config = cp.restConfig()
	if err := cp.startAPIServer(ctx); err != nil {
		cp.etcd.stop(5 * time.Second)
		return err
	}
	cp.log.Info("controlplane: control plane ready", "apiserver", cp.Config.Host, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

func (cp *ControlPlane) choosePorts(fresh bool) (ports, error) {
	file := filepath.Join(cp.Dir, "ports.json")
	var p ports
	if !fresh {
		if b, err := os.ReadFile(file); err == nil && json.Unmarshal(b, &p) == nil &&
			portFree(p.EtcdClient) && portFree(p.EtcdPeer) && portFree(p.APIServer) {
			return p, nil
		}
	}
	free, err := freePorts(3)
	if err != nil {
		return p, err
	}
	p = ports{EtcdClient: free[0], EtcdPeer: free[1], APIServer: free[2]}
	b, _ := json.Marshal(p)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		return p, fmt.Errorf("controlplane: %w", err)
	}
	return p, nil
}

func (cp *ControlPlane) etcdArgs(p ports) []string {
	client := "http://127.0.0.1:" + strconv.Itoa(p.EtcdClient)
	peer := "http://127.0.0.1:" + strconv.Itoa(p.EtcdPeer)
	args := []string{
		"--name=machinist",
		"--data-dir=" + filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=machinist=" + peer,
		"--log-level=warn",
	}
	if cp.tempDir {
		// Throw-away data: skip fsync, which dominates etcd's latency on a shared disk.
		args = append(args, "--unsafe-no-fsync=true")
	}
	return args
}

func (cp *ControlPlane) apiserverArgs(p ports) []string {
	port := strconv.Itoa(p.APIServer)
	args := []string{
		"--etcd-servers=http://127.0.0.1:" + strconv.Itoa(p.EtcdClient),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + port,
		"--cert-dir=" + cp.certs.dir,
		"--tls-cert-file=" + cp.certs.servingCertFile(),
		"--tls-private-key-file=" + cp.certs.servingKeyFile(),
		"--client-ca-file=" + cp.certs.caFile(),
		"--service-account-issuer=https://127.0.0.1:" + port,
		"--service-account-key-file=" + cp.certs.saPublicFile(),
		"--service-account-signing-key-file=" + cp.certs.saKeyFile(),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC",
		"--allow-privileged=true",
		// Room for a thousand node agents and the controllers on one API server.
		"--max-requests-inflight=1000",
		"--max-mutating-requests-inflight=500",
		"--profiling=false",
	}
	if !cp.serviceAccountAdmission() {
		// Without kube-controller-manager nothing creates the default service accounts.
		args = append(args, "--disable-admission-plugins=ServiceAccount")
	}
	return append(args, cp.opts.APIServerArgs...)
}

// restConfig reaches the API server with the admin client certificate.
func (cp *ControlPlane) restConfig() *rest.Config {
	qps, burst := cp.opts.QPS, cp.opts.Burst
	if qps == 0 {
		qps = 1000
	}
	if burst == 0 {
		burst = 2000
	}
	return &rest.Config{
		Host: "https://127.0.0.1:" + strconv.Itoa(cp.APIServerPort),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   cp.certs.caCert,
			CertData: cp.certs.adminCert,
			KeyData:  cp.certs.adminKey,
		},
		QPS:   qps,
		Burst: burst,
	}
}

func (cp *ControlPlane) waitEtcd(ctx context.Context) error {
	url := ""
	for _, a := range cp.etcd.args {
		if v, ok := strings.CutPrefix(a, "--listen-client-urls="); ok {
			url = v + "/health"
		}
	}
	return cp.waitReady(ctx, cp.etcd, http.DefaultClient, url)
}

// startAPIServer starts kube-apiserver and waits for /readyz.
func (cp *ControlPlane) startAPIServer(ctx context.Context) error {
	if err := cp.apiserver.start(); err != nil {
		return err
	}
	transport, err := rest.TransportFor(cp.Config)
	if err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	hc := &http.Client{Transport: transport, Timeout: 5 * time.Second}
	if err := cp.waitReady(ctx, cp.apiserver, hc, cp.Config.Host+"/readyz"); err != nil {
		cp.apiserver.stop(10 * time.Second)
		return err
	}
	return nil
}

// waitReady polls url until it answers 200, the process exits, ctx ends or the start timeout
// passes.
func (cp *ControlPlane) waitReady(ctx context.Context, p *process, hc *http.Client, url string) error {
	return cp.waitFor(ctx, p, "a ready answer at "+url, func(ctx context.Context) bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// StopAPIServer stops kube-apiserver and leaves etcd running, so the API is unreachable until
// StartAPIServer brings it back on the same port with the same data. It simulates an outage, so
// the API server gets only a short grace period: a graceful shutdown would wait up to 30 s for
// the clients' open watches, and kube-apiserver keeps no state of its own to lose.
func (cp *ControlPlane) StopAPIServer() error {
	cp.apiserver.stop(2 * time.Second)
	return waitPortFree(cp.APIServerPort, 30*time.Second)
}

// StartAPIServer starts kube-apiserver again after StopAPIServer and waits until it is ready.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	if err := waitPortFree(cp.APIServerPort, 30*time.Second); err != nil {
		return err
	}
	return cp.startAPIServer(ctx)
}

// Stop stops the components, kube-apiserver and etcd and, for a temporary directory, removes
// it. It is safe to call more than once.
func (cp *ControlPlane) Stop() error {
	cp.stopOnce.Do(func() {
		for _, p := range []*process{cp.scheduler, cp.controllerManager} {
			if p != nil {
				p.stop(10 * time.Second)
			}
		}
		if cp.apiserver != nil {
			cp.apiserver.stop(30 * time.Second)
		}
		if cp.etcd != nil {
			cp.etcd.stop(15 * time.Second)
		}
		if cp.tempDir {
			cp.stopErr = os.RemoveAll(cp.Dir)
		}
	})
	return cp.stopErr
}

func (cp *ControlPlane) writeKubeconfig() error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["machinist"] = &clientcmdapi.Cluster{
		Server:                   cp.Config.Host,
		CertificateAuthorityData: cp.certs.caCert,
	}
	cfg.AuthInfos["machinist-admin"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cp.certs.adminCert,
		ClientKeyData:         cp.certs.adminKey,
	}
	cfg.Contexts["machinist"] = &clientcmdapi.Context{Cluster: "machinist", AuthInfo: "machinist-admin"}
	cfg.CurrentContext = "machinist"
	cp.KubeconfigPath = filepath.Join(cp.Dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, cp.KubeconfigPath); err != nil {
		return fmt.Errorf("controlplane: write kubeconfig: %w", err)
	}
	return nil
}

// findBinDir returns the directory holding etcd and kube-apiserver.
func findBinDir(dir string) (string, error) {
	var candidates []string
	if dir != "" {
		candidates = []string{dir}
	} else {
		if env := os.Getenv("KUBEBUILDER_ASSETS"); env != "" {
			candidates = append(candidates, env)
		}
		if root, err := RepoRoot(); err == nil {
			candidates = append(candidates, filepath.Join(root, "bin"))
		}
	}
	for _, c := range candidates {
		if isExecutable(filepath.Join(c, "etcd")) && isExecutable(filepath.Join(c, "kube-apiserver")) {
			return c, nil
		}
	}
	if len(candidates) == 0 {
		return "", errors.New("controlplane: etcd and kube-apiserver not found (not inside the machinist repository and KUBEBUILDER_ASSETS unset): run `make tools` in the repository or set KUBEBUILDER_ASSETS to a directory holding them")
	}
	return "", fmt.Errorf("controlplane: etcd and kube-apiserver not found in %v: run `make tools` (it builds them into bin/) or set KUBEBUILDER_ASSETS", candidates)
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// RepoRoot returns the root of the machinist repository containing the working directory: the
// nearest parent holding go.mod of module github.com/machinist-io/machinist.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && isMachinistModule(b) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("controlplane: the working directory is not inside the machinist repository")
		}
		dir = parent
	}
}

func isMachinistModule(gomod []byte) bool {
	const want = "module github.com/machinist-io/machinist"
	for _, line := range strings.Split(string(gomod), "\n") {
		if strings.TrimSpace(line) == want {
			return true
		}
	}
	return false
}
