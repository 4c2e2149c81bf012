//go:build !slim

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/harness/localcontrolplane"
)

func init() { commands = append(commands, controlPlaneCommand()) }

// defaultLocalClass is the class of --machines when no --class is given.
const defaultLocalClass = `{"apiVersion":"machine.sapcloud.io/v1alpha1","kind":"MachineClass",
"metadata":{"name":"local","namespace":"default"},"provider":"local","providerSpec":{"cluster":"dev"}}`

func controlPlaneCommand() *cli.Command {
	return &cli.Command{
		Name:  "controlplane",
		Usage: "run a local control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager) for development, optionally with local machines as nodes",
		Description: "Starts the pinned etcd, kube-apiserver, kube-scheduler and kube-controller-manager (built by\n" +
			"`make tools` into bin/) on 127.0.0.1 with machinist's CRDs installed, writes <dir>/kubeconfig and\n" +
			"runs until interrupted. Data, certificates and ports persist in --dir, so a restart continues\n" +
			"where it stopped. With --machines N it also creates N machines of the local provider (state in\n" +
			"<dir>/state) whose node agents run in this process: the nodes are Ready, and run the pods bound\n" +
			"to them, while it runs.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dir", Value: ".cache/controlplane", Usage: "data, certificates, kubeconfig and logs"},
			&cli.StringFlag{Name: "bin-dir", Usage: "directory with etcd and kube-apiserver (default: next to this binary, $KUBEBUILDER_ASSETS, or the repository's bin/)"},
			&cli.BoolFlag{Name: "kube-scheduler", Value: true, Usage: "run kube-scheduler"},
			&cli.BoolFlag{Name: "kube-controller-manager", Value: true, Usage: "run kube-controller-manager"},
			&cli.StringFlag{Name: "crd-dir", Usage: "CRD manifests to install (default: the repository's kubernetes/crds)"},
			&cli.IntFlag{Name: "machines", Usage: "local machines to create (named local-1 … local-N)"},
			&cli.StringFlag{Name: "class", Usage: "MachineClass of the machines (default: provider local, cluster dev)", TakesFile: true},
		},
		Action: runControlPlane,
	}
}

func runControlPlane(c *cli.Context) error {
	log := slog.Default()
	dir, err := filepath.Abs(c.String("dir"))
	if err != nil {
		return err
	}
	opts := localcontrolplane.Options{
		Dir: dir, BinDir: c.String("bin-dir"), Log: log,
		KubeScheduler: c.Bool("kube-scheduler"), KubeControllerManager: c.Bool("kube-controller-manager"),
	}
	if opts.BinDir == "" {
		opts.BinDir = besideExecutable()
	}
	if d := c.String("crd-dir"); d != "" {
		opts.CRDDirs = []string{d}
	}
	fmt.Fprintf(c.App.Writer, "starting %s in %s …\n", strings.Join(controlPlaneComponents(opts), ", "), dir)
	cp, err := localcontrolplane.Start(c.Context, opts)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(c.App.Writer, "stopping the control plane")
		if err := cp.Stop(); err != nil {
			fmt.Fprintf(c.App.ErrWriter, "stop control plane: %v\n", err)
		}
	}()
	fmt.Fprintf(c.App.Writer, "control plane ready at %s\n  export KUBECONFIG=%s\n", cp.Config.Host, cp.KubeconfigPath)

	if n := c.Int("machines"); n > 0 {
		drv, err := createLocalMachines(c, cp, n, filepath.Join(dir, "state"))
		if err != nil {
			return err
		}
		defer closeDriver(drv)
	}
	fmt.Fprintln(c.App.Writer, "running; press Ctrl-C to stop")
	<-c.Context.Done()
	return nil
}

// createLocalMachines creates (or finds again) n local machines and waits until their nodes are
// Ready, printing progress. The returned driver runs their node agents until closed.
func createLocalMachines(c *cli.Context, cp *localcontrolplane.ControlPlane, n int, stateDir string) (driver.Driver, error) {
	var class *v1alpha1.MachineClass
	var err error
	if path := c.String("class"); path != "" {
		class, err = readClass(path)
	} else {
		class, err = parseClass([]byte(defaultLocalClass), "the default local class")
	}
	if err != nil {
		return nil, err
	}
	drv, err := registry.Open(class.Provider, registry.Env{Target: cp.Config, StateDir: stateDir, Log: slog.Default()})
	if err != nil {
		return nil, err
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("local-%d", i+1)
		m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: class.Namespace}}
		resp, err := drv.CreateMachine(c.Context, &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: &corev1.Secret{}})
		if err != nil {
			closeDriver(drv)
			return nil, err
		}
		fmt.Fprintf(c.App.Writer, "machine %s: %s\n", names[i], resp.ProviderID)
	}
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		closeDriver(drv)
		return nil, err
	}
	if err := waitNodesReady(c.Context, cs, names, func(ready int) {
		fmt.Fprintf(c.App.Writer, "nodes Ready: %d/%d\n", ready, len(names))
	}); err != nil {
		closeDriver(drv)
		return nil, err
	}
	return drv, nil
}

// waitNodesReady polls until every named node is Ready, reporting progress when it changes.
func waitNodesReady(ctx context.Context, cs kubernetes.Interface, names []string, progress func(int)) error {
	last, ready := -1, 0
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		ready = 0
		for _, name := range names {
			node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready != last {
			progress(ready)
			last = ready
		}
		return ready == len(names), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for nodes: %w (%d of %d Ready)", err, ready, len(names))
	}
	return nil
}

// besideExecutable returns the directory of this binary when etcd and kube-apiserver are there
// (bin/machinist next to bin/kube-apiserver), else "" to let testenv look elsewhere.
func besideExecutable() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	dir := filepath.Dir(exe)
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, name)); errors.Is(err, os.ErrNotExist) {
			return ""
		}
	}
	return dir
}
