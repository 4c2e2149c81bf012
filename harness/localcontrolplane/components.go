package localcontrolplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The leader-election Leases kube-scheduler and kube-controller-manager hold in kube-system
// while they run (leader election is on, as in any cluster): holding it means the component
// has started its loops, which is when Start returns.
const (
	schedulerLease         = "kube-scheduler"
	controllerManagerLease = "kube-controller-manager"
	// componentQPS and componentBurst are the client limits of both components: room for a
	// thousand nodes (client-go's defaults of 20/30 would make them the bottleneck).
	componentQPS   = 200
	componentBurst = 400
)

// controllerManagerControllers is kube-controller-manager's --controllers: everything a
// cluster runs by default, plus the bootstrap-token signer and cleaner (as kubeadm enables
// them: machinist creates bootstrap tokens), minus the cloud controllers (no cloud provider
// runs in the controller manager since Kubernetes 1.31; named here so the log says why).
const controllerManagerControllers = "*,bootstrap-signer-controller,token-cleaner-controller," +
	"-service-lb-controller,-node-route-controller,-cloud-node-lifecycle-controller"

// componentKubeconfig writes a kubeconfig for a component with its own client certificate
// (user system:kube-scheduler or system:kube-controller-manager, whose RBAC roles the API
// server creates at startup).
func (cp *ControlPlane) componentKubeconfig(name, user string) (string, error) {
	certFile, keyFile, err := cp.certs.clientCert(name, user)
	if err != nil {
		return "", err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["machinist"] = &clientcmdapi.Cluster{Server: cp.Config.Host, CertificateAuthority: cp.certs.caFile()}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile}
	cfg.Contexts["machinist"] = &clientcmdapi.Context{Cluster: "machinist", AuthInfo: user}
	cfg.CurrentContext = "machinist"
	path := filepath.Join(cp.Dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("controlplane: write %s: %w", path, err)
	}
	return path, nil
}

func (cp *ControlPlane) schedulerArgs(kubeconfig string) ([]string, error) {
	config := filepath.Join(cp.Dir, "kube-scheduler.yaml")
	body := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: %d
  burst: %d
`, kubeconfig, componentQPS, componentBurst)
	if err := os.WriteFile(config, []byte(body), 0o600); err != nil {
		return nil, fmt.Errorf("controlplane: write %s: %w", config, err)
	}
	args := []string{
		"--config=" + config,
		// No serving endpoint: readiness is the leader lease, and no port must be found.
		"--secure-port=0",
	}
	return append(args, cp.opts.SchedulerArgs...), nil
}

func (cp *ControlPlane) controllerManagerArgs(kubeconfig string) []string {
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--secure-port=0",
		"--cluster-name=machinist",
		"--controllers=" + controllerManagerControllers,
		// Each controller uses its own service account and RBAC role, as in kubeadm clusters.
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + cp.certs.saKeyFile(),
		"--root-ca-file=" + cp.certs.caFile(),
		"--cluster-signing-cert-file=" + cp.certs.caFile(),
		"--cluster-signing-key-file=" + cp.certs.caKeyFile(),
		fmt.Sprintf("--kube-api-qps=%d", componentQPS),
		fmt.Sprintf("--kube-api-burst=%d", componentBurst),
	}
	return append(args, cp.opts.ControllerManagerArgs...)
}

// startComponents starts the components the options ask for and waits until each holds its
// leader lease (and, for kube-controller-manager, the default service account exists, which the
// ServiceAccount admission plugin requires of every pod).
func (cp *ControlPlane) startComponents(ctx context.Context, binDir string) error {
	if !cp.opts.KubeScheduler && !cp.opts.KubeControllerManager {
		return nil
	}
	cs, err := kubernetes.NewForConfig(rest.CopyConfig(cp.Config))
	if err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	type component struct {
		p     *process
		lease string
		since time.Time
	}
	var started []component
	if cp.opts.KubeControllerManager {
		kc, err := cp.componentKubeconfig("controller-manager", "system:kube-controller-manager")
		if err != nil {
			return err
		}
		cp.controllerManager = &process{
			name: "kube-controller-manager", path: filepath.Join(binDir, "kube-controller-manager"),
			args: cp.controllerManagerArgs(kc), logFile: filepath.Join(cp.Dir, "kube-controller-manager.log"),
		}
		started = append(started, component{cp.controllerManager, controllerManagerLease, time.Now()})
		if err := cp.controllerManager.start(); err != nil {
			return err
		}
	}
	if cp.opts.KubeScheduler {
		kc, err := cp.componentKubeconfig("scheduler", "system:kube-scheduler")
		if err != nil {
			return err
		}
		args, err := cp.schedulerArgs(kc)
		if err != nil {
			return err
		}
		cp.scheduler = &process{
			name: "kube-scheduler", path: filepath.Join(binDir, "kube-scheduler"),
			args: args, logFile: filepath.Join(cp.Dir, "kube-scheduler.log"),
		}
		started = append(started, component{cp.scheduler, schedulerLease, time.Now()})
		if err := cp.scheduler.start(); err != nil {
			return err
		}
	}
	for _, c := range started {
		cp.log.Info("controlplane: waiting for "+c.p.name, "log", c.p.logFile)
		err := cp.waitFor(ctx, c.p, "its leader lease", func(ctx context.Context) bool {
			l, err := cs.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, c.lease, metav1.GetOptions{})
			// A lease left by an earlier run of a kept directory does not count.
			return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" &&
				l.Spec.RenewTime != nil && l.Spec.RenewTime.After(c.since.Add(-time.Second))
		})
		if err != nil {
			return err
		}
	}
	if cp.opts.KubeControllerManager {
		err := cp.waitFor(ctx, cp.controllerManager, "the default service account", func(ctx context.Context) bool {
			_, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
			return err == nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// waitFor polls ready until it holds, the process exits, ctx ends or the start timeout passes.
// A process that exits because its port was taken between picking and binding it is reported as
// errAddrInUse, so the caller can pick another.
func (cp *ControlPlane) waitFor(ctx context.Context, p *process, what string, ready func(context.Context) bool) error {
	var exited error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, cp.opts.StartTimeout, true, func(pctx context.Context) (bool, error) {
		select {
		case <-p.done():
			exited = p.exitError()
			if p.logMentions("address already in use") {
				exited = fmt.Errorf("%w: %w", errAddrInUse, exited)
			}
			return false, exited
		default:
		}
		return ready(pctx), nil
	})
	switch {
	case exited != nil:
		return exited
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("controlplane: %s: waiting for %s: %w", p.name, what, ctx.Err())
	}
	return fmt.Errorf("controlplane: %s: still waiting for %s after %s; last lines of %s:\n%s",
		p.name, what, cp.opts.StartTimeout, p.logFile, tail(p.logFile, 25))
}

// checkComponentBinaries fails early, saying how to get them, when a requested component's
// binary is missing.
func (cp *ControlPlane) checkComponentBinaries(binDir string) error {
	var missing []string
	for _, c := range []struct {
		want bool
		name string
	}{{cp.opts.KubeScheduler, "kube-scheduler"}, {cp.opts.KubeControllerManager, "kube-controller-manager"}} {
		if c.want && !isExecutable(filepath.Join(binDir, c.name)) {
			missing = append(missing, c.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("controlplane: %s not found in %s: run `make tools` (it builds them into bin/ from build/tools)",
			strings.Join(missing, " and "), binDir)
	}
	return nil
}

// serviceAccountAdmission reports whether pods get the ServiceAccount admission plugin: only
// with kube-controller-manager, whose service-account controller creates the default service
// accounts it requires.
func (cp *ControlPlane) serviceAccountAdmission() bool { return cp.opts.KubeControllerManager }
