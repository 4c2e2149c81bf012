package v1alpha1_test

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/harness/localcontrolplane"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/harness/testenv/mcmcrds"
)

// Facts of Gardener MCM's published CRDs are in harness/testenv/mcmcrds (source: mcmcrds.Source).

func machinistCRDs(t *testing.T) (string, []*apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	root, err := localcontrolplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "kubernetes", "crds")
	crds, err := mcmcrds.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, crds
}

// TestCRDsNoStricterThanMCM: wherever MCM's CRDs keep unknown fields ours keep them, and ours
// require nothing MCM's do not (but within fields MCM's CRDs lack), so whatever MCM or Gardener
// writes is accepted and kept. A stricter schema fails the comparison (checked on a doctored one).
func TestCRDsNoStricterThanMCM(t *testing.T) {
	_, crds := machinistCRDs(t)
	if len(crds) != len(mcmcrds.All) {
		t.Fatalf("%d CRDs, facts about %d", len(crds), len(mcmcrds.All))
	}
	for _, crd := range crds {
		f, ok := mcmcrds.Of(crd.Spec.Names.Plural)
		if !ok {
			t.Fatalf("no MCM facts about %s", crd.Name)
		}
		if problems := mcmcrds.Stricter(mcmcrds.Read(crd), f); len(problems) > 0 {
			t.Errorf("%s is stricter than MCM's (%s): %v", crd.Name, mcmcrds.Source, problems)
		}
	}

	// The comparison catches a stricter schema: class name required, nodeTemplate pruned.
	for _, crd := range crds {
		if crd.Spec.Names.Plural != "machinesets" {
			continue
		}
		strict := crd.DeepCopy()
		spec := strict.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		mc := spec.Properties["machineClass"]
		mc.Required = []string{"name"}
		spec.Properties["machineClass"] = mc
		tmpl := spec.Properties["template"]
		meta := tmpl.Properties["metadata"]
		meta.XPreserveUnknownFields = nil
		tmpl.Properties["metadata"] = meta
		spec.Properties["template"] = tmpl
		strict.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
		f, _ := mcmcrds.Of("machinesets")
		got := mcmcrds.Stricter(mcmcrds.Read(strict), f)
		want := []string{"keeps no unknown fields at spec.template.metadata", "requires spec.machineClass.name"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("a doctored stricter schema: got %v, want %v", got, want)
		}
	}
}

// TestMCMShapedCRDsMatchTheFacts: the CRD set tests build in MCM's shape from ours has exactly
// MCM's required and preserve-unknown sets and as many properties as MCM's schemas.
func TestMCMShapedCRDsMatchTheFacts(t *testing.T) {
	_, crds := machinistCRDs(t)
	for _, crd := range crds {
		f, _ := mcmcrds.Of(crd.Spec.Names.Plural)
		shaped := crd.DeepCopy()
		if err := mcmcrds.Shape(shaped); err != nil {
			t.Fatal(err)
		}
		for _, m := range mcmcrds.Mismatches(shaped, f) {
			t.Error(m)
		}
		// The comparison sees a difference: one more required property.
		doctored := shaped.DeepCopy()
		root := doctored.Spec.Versions[0].Schema.OpenAPIV3Schema
		root.Required = append(root.Required, "x-only-here")
		if got := mcmcrds.Mismatches(doctored, f); len(got) != 1 || !strings.Contains(got[0], "required") {
			t.Errorf("%s with one more required property: mismatches %q, want the required set", crd.Name, got)
		}
	}
}

// TestMCMAndGardenerObjectsOnBothCRDSets: every kind as Gardener's worker controller writes it
// (testdata/gardener) and as MCM's controllers write it (testdata/mcm: a MachineSet without
// spec.machineClass, a Machine from its template, a MachineClass with a nodeTemplate field this
// API does not know) is accepted with strict field validation and stored unchanged, by
// machinist's CRDs and by CRDs shaped like MCM's.
func TestMCMAndGardenerObjectsOnBothCRDSets(t *testing.T) {
	src, _ := machinistCRDs(t)
	shaped := t.TempDir()
	if err := mcmcrds.Write(src, shaped); err != nil {
		t.Fatal(err)
	}
	for _, set := range []struct{ name, dir string }{{"machinist", src}, {"mcm-shaped", shaped}} {
		t.Run(set.name, func(t *testing.T) {
			env := testenv.Start(t, testenv.WithCRDDirs(set.dir))
			c := env.Client()
			ctx := context.Background()
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shoot--core--prod"}}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			for _, file := range []string{"testdata/gardener/machineclass.yaml", "testdata/mcm/written.yaml"} {
				for _, obj := range readManifests(t, file) {
					applyUnchanged(t, c, obj)
				}
			}
		})
	}
}

// applyUnchanged creates obj with strict field validation and checks that the server changed
// none of its fields but metadata's and kept its labels.
func applyUnchanged(t *testing.T, c client.Client, obj *unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	sent := obj.DeepCopy()
	if err := c.Create(ctx, obj, &client.CreateOptions{Raw: &metav1.CreateOptions{FieldValidation: "Strict"}}); err != nil {
		t.Fatalf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(obj.GroupVersionKind())
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatal(err)
	}
	for key, want := range sent.Object {
		if key == "metadata" {
			continue
		}
		if !reflect.DeepEqual(normalize(t, got.Object[key]), normalize(t, want)) {
			t.Errorf("%s %s: field %q changed by the API server:\n sent %v\n  got %v", obj.GetKind(), obj.GetName(), key, want, got.Object[key])
		}
	}
	if !reflect.DeepEqual(got.GetLabels(), sent.GetLabels()) {
		t.Errorf("%s %s: labels %v, sent %v", obj.GetKind(), obj.GetName(), got.GetLabels(), sent.GetLabels())
	}
}
