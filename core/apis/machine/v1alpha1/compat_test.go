package v1alpha1_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/harness/testenv"
)

func readManifests(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// Manifests written for Gardener's machine-controller-manager must apply unchanged: the API
// server rejects any field our schema lacks (strict field validation) and must not prune any.
func TestGardenerManifestsApplyUnchanged(t *testing.T) {
	env := testenv.Start(t)
	c := env.Client()
	ctx := context.Background()

	objs := readManifests(t, "testdata/gardener/machineclass.yaml")
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: objs[0].GetNamespace()}}); err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		applyUnchanged(t, c, obj)
	}

	// The typed view reads the same manifests.
	var class v1alpha1.MachineClass
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shoot--core--prod", Name: "shoot--core--prod-worker-a-z1-5a5a3"}, &class); err != nil {
		t.Fatal(err)
	}
	if class.Provider != "OpenStack" || class.CredentialsSecretRef.Name != "cloudprovider" || class.SecretRef.Name == "" {
		t.Errorf("class refs: %+v %+v %q", class.SecretRef, class.CredentialsSecretRef, class.Provider)
	}
	if nt := class.NodeTemplate; nt == nil || nt.Capacity.Memory().Cmp(resource.MustParse("16Gi")) != 0 || nt.Zone != "eu-de-1a" || *nt.Architecture != "amd64" {
		t.Errorf("nodeTemplate: %+v", class.NodeTemplate)
	}
	if !bytes.Contains(class.ProviderSpec.Raw, []byte(`"flavorName":"m1.large"`)) {
		t.Errorf("providerSpec not preserved: %s", class.ProviderSpec.Raw)
	}

	var mcd v1alpha1.MachineDeployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shoot--core--prod", Name: "shoot--core--prod-worker-a-z1"}, &mcd); err != nil {
		t.Fatal(err)
	}
	tmpl := mcd.Spec.Template.Spec
	if tmpl.NodeTemplateSpec.Labels["worker.gardener.cloud/pool"] != "worker-a" || len(tmpl.NodeTemplateSpec.Spec.Taints) != 1 {
		t.Errorf("node template lost: %+v", tmpl.NodeTemplateSpec)
	}
	if tmpl.MachineConfiguration == nil || tmpl.MachineDrainTimeout.Duration.Hours() != 2 || *tmpl.MaxEvictRetries != 360 {
		t.Errorf("inline machine configuration lost: %+v", tmpl.MachineConfiguration)
	}
	if ru := mcd.Spec.Strategy.RollingUpdate; ru == nil || *ru.MaxSurge != intstr.FromInt32(1) || *ru.MaxUnavailable != intstr.FromInt32(0) {
		t.Errorf("rolling update: %+v", mcd.Spec.Strategy.RollingUpdate)
	}

	// Subresources: status on Machine, scale on MachineSet and MachineDeployment.
	var m v1alpha1.Machine
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shoot--core--prod", Name: "shoot--core--prod-worker-a-z1-abcde-x7k2p"}, &m); err != nil {
		t.Fatal(err)
	}
	m.Status.CurrentStatus.Phase = v1alpha1.MachineRunning
	m.Status.LastOperation = v1alpha1.LastOperation{Type: v1alpha1.MachineOperationCreate, State: v1alpha1.MachineStateSuccessful, ErrorCode: "OK"}
	if err := c.Status().Update(ctx, &m); err != nil {
		t.Fatalf("status subresource: %v", err)
	}
	scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 5}}
	if err := c.SubResource("scale").Update(ctx, &mcd, client.WithSubResourceBody(scale)); err != nil {
		t.Fatalf("scale subresource: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(&mcd), &mcd); err != nil || mcd.Spec.Replicas != 5 {
		t.Fatalf("scale did not set spec.replicas: %v %d", err, mcd.Spec.Replicas)
	}
}

// normalize round-trips a value through JSON so int64/float64 differences of the decoders do
// not count as changes.
func normalize(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// The CRDs carry MCM's short names, subresources and printer columns.
func TestCRDShape(t *testing.T) {
	env := testenv.Start(t)
	c := env.Client()
	want := map[string]struct {
		short   string
		scale   bool
		columns []string
	}{
		"machineclasses.machine.sapcloud.io":     {"mcc", false, nil},
		"machines.machine.sapcloud.io":           {"mc", false, []string{"Status", "Age", "Node", "Last Operation", "Standby", "ProviderID"}},
		"machinesets.machine.sapcloud.io":        {"mcs", true, []string{"Desired", "Current", "Ready"}},
		"machinedeployments.machine.sapcloud.io": {"mcd", true, []string{"Ready", "Desired", "Up-to-date", "Available"}},
	}
	for name, w := range want {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(context.Background(), client.ObjectKey{Name: name}, &crd); err != nil {
			t.Fatal(err)
		}
		if len(crd.Spec.Names.ShortNames) != 1 || crd.Spec.Names.ShortNames[0] != w.short {
			t.Errorf("%s short names %v, want %s", name, crd.Spec.Names.ShortNames, w.short)
		}
		v := crd.Spec.Versions[0]
		if v.Name != "v1alpha1" || !v.Served || !v.Storage {
			t.Errorf("%s version %+v", name, v.Name)
		}
		if crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
			t.Errorf("%s scope %s", name, crd.Spec.Scope)
		}
		if w.scale != (v.Subresources != nil && v.Subresources.Scale != nil) {
			t.Errorf("%s scale subresource: %+v", name, v.Subresources)
		}
		cols := map[string]bool{}
		for _, col := range v.AdditionalPrinterColumns {
			cols[col.Name] = true
		}
		for _, col := range w.columns {
			if !cols[col] {
				t.Errorf("%s lacks printer column %s", name, col)
			}
		}
	}
}
