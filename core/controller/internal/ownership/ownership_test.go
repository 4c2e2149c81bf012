package ownership

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

func TestSelectorRefusesEmptyAndInvalid(t *testing.T) {
	for _, s := range []*metav1.LabelSelector{nil, {}, {MatchLabels: map[string]string{}}} {
		if _, err := Selector(s); err == nil || !strings.Contains(err.Error(), "spec.selector is empty") {
			t.Errorf("Selector(%v) = %v, want the empty-selector error", s, err)
		}
	}
	bad := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: "Sometimes"}}}
	if _, err := Selector(bad); err == nil || !strings.Contains(err.Error(), "spec.selector is invalid") {
		t.Errorf("Selector(invalid) = %v, want the invalid-selector error", err)
	}
	sel, err := Selector(&metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}})
	if err != nil || sel.String() != "pool=a" {
		t.Fatalf("Selector = %v, %v", sel, err)
	}
}

// sets is a client.Reader listing fixed MachineSets of the namespace it is asked for.
type sets struct {
	client.Reader
	items []v1alpha1.MachineSet
}

func (s sets) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := &client.ListOptions{}
	o.ApplyOptions(opts)
	out := list.(*v1alpha1.MachineSetList)
	for _, ms := range s.items {
		if ms.Namespace == o.Namespace {
			out.Items = append(out.Items, ms)
		}
	}
	return nil
}

func TestOrphanMapperMapsOnlyOrphansToMatchingOwners(t *testing.T) {
	set := func(ns, name string, sel map[string]string) v1alpha1.MachineSet {
		ms := v1alpha1.MachineSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if sel != nil {
			ms.Spec.Selector = &metav1.LabelSelector{MatchLabels: sel}
		}
		return ms
	}
	mapper := OrphanMapper(sets{items: []v1alpha1.MachineSet{
		set("ns", "a", map[string]string{"pool": "a"}),
		set("ns", "a-too", map[string]string{"pool": "a"}),
		set("ns", "b", map[string]string{"pool": "b"}),
		set("ns", "empty", nil), // selects nothing, not everything
		set("other", "a", map[string]string{"pool": "a"}),
	}}, func() *v1alpha1.MachineSetList { return &v1alpha1.MachineSetList{} },
		func(o client.Object) *metav1.LabelSelector { return o.(*v1alpha1.MachineSet).Spec.Selector })

	orphan := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m", Labels: map[string]string{"pool": "a"}}}
	got := mapper(context.Background(), orphan)
	if len(got) != 2 || got[0].Name != "a" || got[1].Name != "a-too" || got[0].Namespace != "ns" {
		t.Fatalf("orphan mapped to %v, want ns/a and ns/a-too", got)
	}

	owned := orphan.DeepCopy()
	owned.OwnerReferences = []metav1.OwnerReference{{Kind: "MachineSet", Name: "b", UID: "u", Controller: ptr.To(true)}}
	if got := mapper(context.Background(), owned); len(got) != 0 {
		t.Fatalf("a controlled machine mapped to %v", got)
	}
	deleting := orphan.DeepCopy()
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	if got := mapper(context.Background(), deleting); len(got) != 0 {
		t.Fatalf("a machine being deleted mapped to %v", got)
	}
}
