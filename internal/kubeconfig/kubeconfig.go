// Package kubeconfig is the one place a kubeconfig flag's value becomes a rest.Config, so every
// subcommand reads --control-kubeconfig and --target-kubeconfig by the same rules
// (docs/controllers.md, "Kubeconfig flags"):
//
//   - a path: that kubeconfig file, at its current context;
//   - "inClusterConfig": the in-cluster config (the pod's service account), as Gardener's MCM
//     reads the same value (cmd/machine-controller-manager/app/controllermanager.go in
//     gardener/machine-controller-manager at 54caf546e0f417b1d2a7db436ea0098176267a74);
//   - empty: $KUBECONFIG (a list of files, merged as kubectl merges them), else the in-cluster
//     config. ~/.kube/config is never read implicitly: a controller that deletes VMs acts on the
//     cluster it was told, not on the one a person last used.
//
// What an empty flag means is the caller's choice when the flag has another default (the target
// cluster of `run` is the control cluster; a driver's target is none): such callers decide
// before they call Load.
package kubeconfig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// InCluster is the flag value that names the in-cluster config, as in MCM.
const InCluster = "inClusterConfig"

// Load returns the config a kubeconfig flag's value names. Its errors say what was tried; the
// caller names the flag.
func Load(value string) (*rest.Config, error) {
	switch value {
	case InCluster:
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("%s: not running in a pod with a service account: %w", InCluster, err)
		}
		return cfg, nil
	case "":
		env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar)
		if env == "" {
			cfg, err := rest.InClusterConfig()
			if err != nil {
				return nil, fmt.Errorf("no kubeconfig given, $KUBECONFIG is unset and not running in a pod (%w): pass a kubeconfig file", err)
			}
			return cfg, nil
		}
		cfg, err := load(&clientcmd.ClientConfigLoadingRules{Precedence: filepath.SplitList(env)})
		if err != nil {
			return nil, fmt.Errorf("$KUBECONFIG %s: %w", env, err)
		}
		return cfg, nil
	}
	cfg, err := load(&clientcmd.ClientConfigLoadingRules{ExplicitPath: value})
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", value, err)
	}
	return cfg, nil
}

// load merges the files of rules and builds the config of the current context, with no
// fallback to the in-cluster config (clientcmd's deferred loading would take it when the files
// are missing or empty).
func load(rules *clientcmd.ClientConfigLoadingRules) (*rest.Config, error) {
	raw, err := rules.Load()
	if err != nil {
		return nil, err
	}
	if len(raw.Clusters) == 0 {
		return nil, errors.New("no clusters in it (missing or empty file?)")
	}
	return clientcmd.NewDefaultClientConfig(*raw, &clientcmd.ConfigOverrides{}).ClientConfig()
}
