package safety

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

func TestOvershootCheckWakesOnlyForCountChanges(t *testing.T) {
	owned := func(uid string) *v1alpha1.Machine {
		return &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m", OwnerReferences: []metav1.OwnerReference{
			{Kind: "MachineSet", Name: "s", UID: k8stypes.UID("set-" + uid), Controller: ptr.To(true)}}}}
	}
	base := owned("a")
	relabelled := base.DeepCopy()
	relabelled.Labels = map[string]string{"node": "n"}
	relabelled.Status.CurrentStatus.Phase = v1alpha1.MachineRunning
	deleting := base.DeepCopy()
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	moved := owned("b")

	for _, c := range []struct {
		name string
		new  *v1alpha1.Machine
		want bool
	}{
		{"status and labels", relabelled, false},
		{"starts terminating", deleting, true},
		{"another controller", moved, true},
	} {
		if got := countChanged().Update(event.UpdateEvent{ObjectOld: base, ObjectNew: c.new}); got != c.want {
			t.Errorf("%s: passes = %v, want %v", c.name, got, c.want)
		}
	}
}
