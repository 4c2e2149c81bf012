package standby

import (
	"errors"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

func TestDesired(t *testing.T) {
	for _, tc := range []struct {
		value   *string
		want    int
		wantErr bool
	}{
		{value: nil, want: 0},
		{value: ptr.To("0"), want: 0},
		{value: ptr.To("3"), want: 3},
		{value: ptr.To("100"), want: 100},
		{value: ptr.To("101"), wantErr: true},
		{value: ptr.To("-1"), wantErr: true},
		{value: ptr.To("two"), wantErr: true},
		{value: ptr.To(""), wantErr: true},
	} {
		md := &v1alpha1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}}
		if tc.value != nil {
			md.Annotations = map[string]string{Annotation: *tc.value}
		}
		got, err := Desired(md)
		if tc.wantErr {
			if err == nil || !strings.Contains(err.Error(), Annotation) || !strings.Contains(err.Error(), "ns/web") {
				t.Errorf("Desired(%q) = %d, %v; want an error naming the annotation and the deployment", *tc.value, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Desired(%v) = %d, %v; want %d", tc.value, got, err, tc.want)
		}
	}
}

func TestPlanPool(t *testing.T) {
	for _, tc := range []struct {
		name    string
		want    int
		members []Member
		plan    Plan
	}{
		{name: "empty pool fills", want: 3, plan: Plan{Create: 3}},
		{name: "full pool rests", want: 2, members: []Member{{Name: "a", Hash: "h1", State: Stopped}, {Name: "b", Hash: "h1", State: Booting}}, plan: Plan{}},
		{name: "deleting ones do not count", want: 2,
			members: []Member{{Name: "a", Hash: "h1", State: Stopped}, {Name: "b", Hash: "h1", State: Stopped, Deleting: true}},
			plan:    Plan{Create: 1}},
		{name: "outdated go and are replaced", want: 2,
			members: []Member{{Name: "old-b", Hash: "h0", State: Stopped}, {Name: "old-a", Hash: "h0", State: Booting}, {Name: "c", Hash: "h1", State: Stopped}},
			plan:    Plan{Create: 1, Delete: []string{"old-a", "old-b"}}},
		{name: "surplus goes youngest in life first", want: 1,
			members: []Member{{Name: "s", Hash: "h1", State: Stopped}, {Name: "p", Hash: "h1", State: Stopping}, {Name: "b", Hash: "h1", State: Booting}},
			plan:    Plan{Delete: []string{"b", "p"}}},
		{name: "want 0 empties the pool", want: 0,
			members: []Member{{Name: "s", Hash: "h1", State: Stopped}, {Name: "o", Hash: "h0", State: Stopped}},
			plan:    Plan{Delete: []string{"o", "s"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := PlanPool(tc.want, "h1", tc.members)
			if got.Create != tc.plan.Create || !slices.Equal(got.Delete, tc.plan.Delete) {
				t.Errorf("PlanPool = %+v; want %+v", got, tc.plan)
			}
		})
	}
}

func TestClaimable(t *testing.T) {
	pool := []Member{
		{Name: "boot-a", Hash: "h1", State: Booting},
		{Name: "stop-b", Hash: "h1", State: Stopped},
		{Name: "stop-a", Hash: "h1", State: Stopped},
		{Name: "stopping", Hash: "h1", State: Stopping},
		{Name: "old", Hash: "h0", State: Stopped},
		{Name: "gone", Hash: "h1", State: Stopped, Deleting: true},
	}
	for n, want := range map[int][]string{
		0:  nil,
		1:  {"stop-a"},
		2:  {"stop-a", "stop-b"},
		3:  {"stop-a", "stop-b", "boot-a"},
		10: {"stop-a", "stop-b", "boot-a"},
		-1: nil,
	} {
		if got := Claimable(pool, "h1", n); !slices.Equal(got, want) {
			t.Errorf("Claimable(n=%d) = %v; want %v", n, got, want)
		}
	}
}

func testObjects() (*v1alpha1.MachineDeployment, *v1alpha1.MachineSet) {
	md := &v1alpha1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "md-uid"}}
	ms := &v1alpha1.MachineSet{ObjectMeta: metav1.ObjectMeta{Name: "web-h1", Namespace: "ns", UID: "ms-uid",
		Labels: map[string]string{v1alpha1.LabelMachineTemplateHash: "h1", "name": "web"}}}
	ms.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"name": "web", v1alpha1.LabelMachineTemplateHash: "h1"}}
	ms.Spec.MachineClass = v1alpha1.ClassSpec{Kind: "MachineClass", Name: "small"}
	ms.Spec.Template.Labels = map[string]string{"name": "web", v1alpha1.LabelMachineTemplateHash: "h1"}
	ms.Spec.Template.Annotations = map[string]string{"team": "a"}
	return md, ms
}

// A standby machine matches no selector of its deployment's sets, is owned by the deployment, and
// reads back as a Booting member of the current template; claimed, it is the set's.
func TestNewMachineAndClaim(t *testing.T) {
	md, ms := testObjects()
	m := NewMachine(md, ms)
	m.Name = "web-standby-x"
	sel, err := metav1.LabelSelectorAsSelector(ms.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Matches(labels.Set(m.Labels)) {
		t.Errorf("the standby machine's labels %v match the set's selector %v: the set would adopt it", m.Labels, sel)
	}
	if o := metav1.GetControllerOf(m); o == nil || o.Kind != "MachineDeployment" || o.UID != md.UID {
		t.Errorf("controller of the standby machine = %+v; want the deployment", o)
	}
	if m.Spec.Class.Name != "small" || m.Annotations["team"] != "a" || m.Annotations[v1alpha1.AnnotationMachinePriority] != "3" {
		t.Errorf("standby machine class %q, annotations %v; want the set's class and template annotations", m.Spec.Class.Name, m.Annotations)
	}
	if ms.Spec.Template.Annotations[Annotation] != "" || ms.Spec.Template.Spec.MachineConfiguration != nil {
		t.Error("NewMachine wrote into the set's template")
	}
	if ts := m.Spec.NodeTemplateSpec.Spec.Taints; len(ts) != 1 || ts[0].Key != Annotation || ts[0].Effect != "NoSchedule" {
		t.Errorf("standby node taints %v; want the standby taint (NoSchedule)", ts)
	}
	if c := m.Spec.MachineConfiguration; c == nil || c.DisableHealthTimeout == nil || !*c.DisableHealthTimeout {
		t.Errorf("standby machine configuration %+v; want the health timeout disabled (MCM would fail it once stopped)", c)
	}
	mem, ok := MemberOf(m, "web")
	if !ok || mem != (Member{Name: "web-standby-x", Hash: "h1", State: Booting}) {
		t.Errorf("MemberOf = %+v, %v; want a booting member of h1", mem, ok)
	}
	if _, ok := MemberOf(m, "other"); ok {
		t.Error("a standby machine of web reads as one of other")
	}

	m.Annotations[AnnotationState] = string(Stopped)
	m.Labels[v1alpha1.LabelNode] = "web-standby-x"
	c := Claim(m, ms)
	if c.Labels[v1alpha1.LabelNode] != "web-standby-x" || c.Labels[LabelDeployment] != "" {
		t.Errorf("claimed machine labels %v; want its node label kept and %s gone", c.Labels, LabelDeployment)
	}
	if !sel.Matches(labels.Set(c.Labels)) {
		t.Errorf("the claimed machine's labels %v do not match the set's selector", c.Labels)
	}
	if o := metav1.GetControllerOf(c); o == nil || o.Kind != "MachineSet" || o.UID != ms.UID || len(c.OwnerReferences) != 1 {
		t.Errorf("owners of the claimed machine = %+v; want the set only", c.OwnerReferences)
	}
	if _, ok := MemberOf(c, "web"); ok {
		t.Error("a claimed machine still reads as standby")
	}
	if len(c.Spec.NodeTemplateSpec.Spec.Taints) != 0 {
		t.Errorf("claimed node taints %v; want the template's (none)", c.Spec.NodeTemplateSpec.Spec.Taints)
	}
	if c.Spec.MachineConfiguration != nil {
		t.Errorf("claimed machine configuration %+v; want the template's (none)", c.Spec.MachineConfiguration)
	}
	if NextStep(c, true) != Start {
		t.Errorf("NextStep of a claimed stopped machine = %v; want Start", NextStep(c, true))
	}
	if m.Annotations[Annotation] != "web" {
		t.Error("Claim changed the machine it was given")
	}
	m.Annotations[AnnotationState] = string(Booting)
	if c := Claim(m, ms); NextStep(c, false) != None {
		t.Errorf("NextStep of a machine claimed while booting = %v; want None", NextStep(c, false))
	}
}

func TestNextStep(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name      string
		ann       map[string]string
		deleting  bool
		readyOnce bool
		want      Step
	}{
		{name: "plain machine", ann: nil, readyOnce: true, want: None},
		{name: "booting, not ready yet", ann: map[string]string{Annotation: "web", AnnotationState: "Booting"}, want: AwaitReady},
		{name: "booting, ready once", ann: map[string]string{Annotation: "web", AnnotationState: "Booting"}, readyOnce: true, want: Stop},
		{name: "stopping goes on without a node", ann: map[string]string{Annotation: "web", AnnotationState: "Stopping"}, want: Stop},
		{name: "stopped rests", ann: map[string]string{Annotation: "web", AnnotationState: "Stopped"}, want: Idle},
		{name: "claimed while stopped starts", ann: map[string]string{AnnotationState: "Stopped"}, want: Start},
		{name: "deleting is the termination's", ann: map[string]string{Annotation: "web", AnnotationState: "Stopped"}, deleting: true, want: None},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m", Annotations: tc.ann}}
			if tc.deleting {
				m.DeletionTimestamp = &now
			}
			if got := NextStep(m, tc.readyOnce); got != tc.want {
				t.Errorf("NextStep = %v; want %v", got, tc.want)
			}
		})
	}
}

func TestOnStartError(t *testing.T) {
	for code, want := range map[driver.Code]StartFailure{
		driver.ResourceExhausted: Replace,
		driver.NotFound:          Replace,
		driver.Unimplemented:     Replace,
		driver.Unavailable:       Retry,
		driver.Internal:          Retry,
	} {
		if got := OnStartError(driver.Error(code, "x")); got != want {
			t.Errorf("OnStartError(%v) = %v; want %v", code, got, want)
		}
	}
	if got := OnStartError(errors.New("plain")); got != Retry {
		t.Errorf("OnStartError(plain error) = %v; want Retry", got)
	}
}
