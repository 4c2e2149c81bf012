// Package gardenerseed records how a Gardener seed runs MCM: the command lines gardenlet and a
// provider extension give MCM's two containers, and the files those containers read, so tests
// start machinist's halves exactly as a seed would. Every value is from gardener/gardener at
// Commit unless said otherwise.
package gardenerseed

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Commit is the gardener/gardener commit the command lines are from (21 August 2026).
const Commit = "b312835d1784c3628983205c05452b2eaa95b645"

// Paths and ports of the pod (pkg/utils/gardener/shoot.go: VolumeMountPathGenericKubeconfig,
// PathGenericKubeconfig, PathShootToken; pkg/component/nodemanagement/machinecontrollermanager:
// portMetrics, portProviderMetrics).
const (
	// GenericKubeconfigDir is where the shoot's generic kubeconfig secret is mounted.
	GenericKubeconfigDir = "/var/run/secrets/gardener.cloud/shoot/generic-kubeconfig"
	// GenericKubeconfig is the target cluster's kubeconfig both containers get.
	GenericKubeconfig = GenericKubeconfigDir + "/kubeconfig"
	// ShootToken is the token file GenericKubeconfig names (tokenFile), renewed by Gardener.
	ShootToken = GenericKubeconfigDir + "/token"
	// CorePort and ProviderPort serve /metrics and /healthz of the two containers (port names
	// "metrics" and "providermetrics").
	CorePort     = 10258
	ProviderPort = 10259
)

// CoreCommand is the Command of the machine-controller-manager container gardenlet deploys
// (pkg/component/nodemanagement/machinecontrollermanager/machine_controller_manager.go, Deploy),
// for the control-plane namespace of a shoot that is not self-hosted. The container
// runs in the image's working directory, "/" in MCM's image.
func CoreCommand(namespace string) []string {
	return []string{
		"./machine-controller-manager",
		"--control-kubeconfig=inClusterConfig",
		"--machine-safety-overshooting-period=1m",
		"--namespace=" + namespace,
		fmt.Sprintf("--port=%d", CorePort),
		"--safety-up=2",
		"--safety-down=1",
		"--target-kubeconfig=" + GenericKubeconfig,
		"--concurrent-syncs=30",
		"--kube-api-qps=150",
		"--kube-api-burst=200",
		"--v=3",
	}
}

// ProviderSidecarArgs are the Args of the machine-controller-manager-<provider> sidecar a
// provider extension injects into that deployment with ProviderSidecarContainer
// (pkg/component/nodemanagement/machinecontrollermanager/provider.go; provider-local's
// pkg/provider-local/webhook/controlplane/ensurer.go uses it as is), for a shoot that is not
// self-hosted. Gardener sets no Command: the image's entrypoint, /machine-controller in MCM's
// provider images, runs them.
func ProviderSidecarArgs(namespace string) []string {
	return []string{
		"--control-kubeconfig=inClusterConfig",
		"--kube-api-qps=100",
		"--kube-api-burst=200",
		"--machine-creation-timeout=20m",
		"--machine-drain-timeout=2h",
		"--machine-health-timeout=10m",
		"--machine-safety-apiserver-statuscheck-timeout=30s",
		"--machine-safety-apiserver-statuscheck-period=1m",
		"--machine-safety-orphan-vms-period=30m",
		"--namespace=" + namespace,
		fmt.Sprintf("--port=%d", ProviderPort),
		"--target-kubeconfig=" + GenericKubeconfig,
		"--v=3",
	}
}

// CoreCommandBefore2023 is CoreCommand as gardenlet wrote it before gardener/gardener 425656d311
// ("flags cleaned up", April 2023), at its parent: MCM's core then still took the provider
// half's safety flags and --delete-migrated-machine-class.
func CoreCommandBefore2023(namespace string) []string {
	return []string{
		"./machine-controller-manager",
		"--control-kubeconfig=inClusterConfig",
		"--delete-migrated-machine-class=true",
		"--machine-safety-apiserver-statuscheck-timeout=30s",
		"--machine-safety-apiserver-statuscheck-period=1m",
		"--machine-safety-orphan-vms-period=30m",
		"--machine-safety-overshooting-period=1m",
		"--namespace=" + namespace,
		fmt.Sprintf("--port=%d", CorePort),
		"--safety-up=2",
		"--safety-down=1",
		"--target-kubeconfig=" + GenericKubeconfig,
		"--v=3",
	}
}

// WriteGenericKubeconfig writes what Gardener mounts at GenericKubeconfigDir into dir: token,
// and kubeconfig, a kubeconfig of server (whose CA is caPEM) that reads its token from
// tokenFile, as Gardener's generic token kubeconfig does (tokenFile ShootToken in a pod).
// The files are readable by every user: the containers run as a non-root user.
func WriteGenericKubeconfig(dir, server string, caPEM []byte, token, tokenFile string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["shoot"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["shoot"] = &clientcmdapi.AuthInfo{TokenFile: tokenFile}
	cfg.Contexts["shoot"] = &clientcmdapi.Context{Cluster: "shoot", AuthInfo: "shoot"}
	cfg.CurrentContext = "shoot"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("gardenerseed: kubeconfig: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubeconfig"), data, 0o644); err != nil {
		return fmt.Errorf("gardenerseed: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(token), 0o644); err != nil {
		return fmt.Errorf("gardenerseed: %w", err)
	}
	return nil
}
