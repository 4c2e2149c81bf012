package fallback_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/controller/machinedeployment"
	"github.com/machinist-io/machinist/core/controller/machineset"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/harness/localcontrolplane"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/eventually"
)

// crdsWithoutFallbackField copies machinist's CRDs with status.fallbackReplicas (and its
// column) taken out of the MachineDeployment CRD, as Gardener MCM's CRD is.
func crdsWithoutFallbackField(t *testing.T) string {
	t.Helper()
	root, err := localcontrolplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(root, "kubernetes", "crds")
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(e.Name(), "machinedeployments") {
			data = []byte(dropFallbackField(t, string(data)))
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// dropFallbackField removes the printer column (a "- description: Machines running on a
// fallback class" list item, up to the next item) and the schema property (a "fallbackReplicas:"
// key, up to the next line indented no deeper).
func dropFallbackField(t *testing.T, crd string) string {
	t.Helper()
	indentOf := func(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }
	lines := strings.Split(crd, "\n")
	var out []string
	dropped := 0
	for i := 0; i < len(lines); i++ {
		l, trimmed := lines[i], strings.TrimSpace(lines[i])
		var end func(next string) bool
		switch {
		case strings.HasPrefix(trimmed, "- description: Machines running on a fallback class"):
			end = func(next string) bool { return indentOf(next) <= indentOf(l) }
		case trimmed == "fallbackReplicas:":
			end = func(next string) bool { return indentOf(next) <= indentOf(l) }
		default:
			out = append(out, l)
			continue
		}
		dropped++
		for i+1 < len(lines) && !end(lines[i+1]) {
			i++
		}
	}
	res := strings.Join(out, "\n")
	if dropped != 2 || strings.Contains(res, "fallbackReplicas") {
		t.Fatalf("could not take fallbackReplicas out of the CRD (%d blocks dropped)", dropped)
	}
	return res
}

// TestPrunedFallbackFieldIsNotWrittenAgain: under a CRD without status.fallbackReplicas (Gardener
// MCM's) the API server drops the count; the MachineDeployment controller must notice and stop
// sending it, instead of writing the status again on every reconcile.
func TestPrunedFallbackFieldIsNotWrittenAgain(t *testing.T) {
	env := testenv.Start(t, testenv.WithCRDDirs(crdsWithoutFallbackField(t)))
	ctx := context.Background()
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "pruned"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b"} {
		if err := c.Create(ctx, &v1alpha1.MachineClass{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}, Provider: "local", ProviderSpec: runtime.RawExtension{Raw: []byte(`{}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	labels := map[string]string{"pool": "p"}
	d := &v1alpha1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", Annotations: map[string]string{fallback.AnnotationClasses: "b"}},
		Spec: v1alpha1.MachineDeploymentSpec{
			Replicas: 2,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1alpha1.MachineTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: "a"}},
			},
		},
	}
	if err := c.Create(ctx, d); err != nil {
		t.Fatal(err)
	}

	// The MachineSet and MachineDeployment controllers, with class a marked: the set's machines
	// start on b. No Machine controller runs: the machines stay as created.
	marks := fallback.NewCache(time.Hour)
	marks.Mark(ns, "a", "stock-out")
	// Count the controllers' status writes of the deployment (a write the server turns into a
	// no-op sends no watch event, so requests are counted, not events).
	var statusWrites atomic.Int32
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/machinedeployments/p/status") {
				statusWrites.Add(1)
			}
			return rt.RoundTrip(r)
		})
	}
	ctrltest.RunManager(t, cfg, ns, func(mgr crmanager.Manager) error {
		if err := machineset.Setup(mgr, machineset.Options{Fallback: marks}); err != nil {
			return err
		}
		return machinedeployment.Setup(mgr, machinedeployment.Options{Log: ctrltest.Logger()})
	})

	eventually.True(t, time.Minute, "2 machines on b and the deployment's status counting them", func() bool {
		var list v1alpha1.MachineList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil || len(list.Items) != 2 {
			return false
		}
		for _, m := range list.Items {
			if m.Spec.Class.Name != "b" {
				return false
			}
		}
		got := &v1alpha1.MachineDeployment{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(d), got); err != nil {
			return false
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == fallback.ConditionClasses && got.Status.Replicas == 2 {
				return got.Status.FallbackReplicas == 0 // pruned by the server
			}
		}
		return false
	})
	// Every machine event reconciles the deployment; each would write the status again if the
	// controller kept trying to store the count.
	var list v1alpha1.MachineList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	before := statusWrites.Load()
	for i := range 5 {
		m := &list.Items[0]
		patch := client.MergeFrom(m.DeepCopy())
		m.Annotations["test.machinist.io/touch"] = fmt.Sprint(i)
		if err := c.Patch(ctx, m, patch); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // the reconciles of the touches
	if n := statusWrites.Load() - before; n > 1 {
		t.Fatalf("%d status writes of the deployment for 5 machine events in steady state: the pruned field is written again and again", n)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
