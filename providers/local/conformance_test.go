package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/harness/testenv"
)

func TestConformance(t *testing.T) {
	volume := drivertest.Volume{
		Spec: &corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
			CSI: &corev1.CSIPersistentVolumeSource{Driver: CSIDriverName, VolumeHandle: "local-vol-1"},
		}},
		ID: "local-vol-1",
	}
	target := func(t testing.TB, env registry.Env) drivertest.Target {
		env.StateDir = t.TempDir()
		d, err := New(env)
		if err != nil {
			t.Fatal(err)
		}
		machines := filepath.Join(env.StateDir, StateSubdir, "machines")
		return drivertest.Target{
			Driver:     d,
			Class:      class(t, "conformance", map[string]any{"cluster": "conformance"}),
			OtherClass: class(t, "other", map[string]any{"cluster": "other"}),
			Secret:     secret(nil),
			// The backend is the state dir: count the machine's record files, not via the driver.
			CountVMs: func(ctx context.Context, name string) (int, error) {
				_, err := os.Stat(filepath.Join(machines, name+".json"))
				if errors.Is(err, os.ErrNotExist) {
					return 0, nil
				}
				return 1, err
			},
			Volumes: []drivertest.Volume{volume},
			Close:   func() { d.Close() },
		}
	}

	t.Run("no target", func(t *testing.T) {
		drivertest.Run(t, func(t testing.TB) drivertest.Target { return target(t, registry.Env{}) })
	})

	t.Run("real API server", func(t *testing.T) {
		cp := testenv.Start(t)
		drivertest.Run(t, func(t testing.TB) drivertest.Target {
			tg := target(t, registry.Env{Target: cp.Config})
			count := tg.CountVMs
			// Here a VM is also a Node: both must agree.
			tg.CountVMs = func(ctx context.Context, name string) (int, error) {
				n, err := count(ctx, name)
				if err != nil {
					return 0, err
				}
				nodes, err := cp.Clientset().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
				if err != nil {
					return 0, err
				}
				withNode := 0
				for _, node := range nodes.Items {
					if node.Spec.ProviderID == ProviderIDPrefix+name {
						withNode++
					}
				}
				// A stopped VM has no node (the agent deleted it).
				if stopped := tg.Driver.(*Driver).Stopped(name); withNode != n && (!stopped || withNode != 0) {
					t.Errorf("machine %s: %d records (stopped: %v) but %d nodes", name, n, stopped, withNode)
				}
				return n, nil
			}
			return tg
		}, drivertest.WithTimeout(30*time.Second))
	})
}
