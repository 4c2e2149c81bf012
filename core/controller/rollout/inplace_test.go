package rollout

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

func inPlaceDeployment(replicas int32, surge, unavail *intstr.IntOrString, orchestration v1alpha1.OrchestrationType) *v1alpha1.MachineDeployment {
	d := deployment(replicas, nil, nil)
	d.Spec.Selector = nil
	d.Spec.Strategy = v1alpha1.MachineDeploymentStrategy{
		Type: v1alpha1.InPlaceUpdateMachineDeploymentStrategyType,
		InPlaceUpdate: &v1alpha1.InPlaceUpdateMachineDeployment{
			UpdateConfiguration: v1alpha1.UpdateConfiguration{MaxSurge: surge, MaxUnavailable: unavail},
			OrchestrationType:   orchestration,
		},
	}
	return d
}

func TestValidateInPlaceNamesTheField(t *testing.T) {
	one := ptr.To(intstr.FromInt32(1))
	for _, tc := range []struct {
		name string
		d    *v1alpha1.MachineDeployment
		want []string // substrings of the error; none: valid
	}{
		{"valid auto", inPlaceDeployment(3, one, one, v1alpha1.OrchestrationTypeAuto), nil},
		{"valid manual, percentages", inPlaceDeployment(3, ptr.To(intstr.FromString("0%")), ptr.To(intstr.FromString("50%")), v1alpha1.OrchestrationTypeManual), nil},
		{"block missing", func() *v1alpha1.MachineDeployment {
			d := inPlaceDeployment(3, one, one, v1alpha1.OrchestrationTypeAuto)
			d.Spec.Strategy.InPlaceUpdate = nil
			return d
		}(), []string{"spec.strategy.inPlaceUpdate is required"}},
		{"orchestration missing", inPlaceDeployment(3, one, one, ""), []string{`spec.strategy.inPlaceUpdate.orchestrationType "" is invalid: use Auto`}},
		{"orchestration misspelt", inPlaceDeployment(3, one, one, "auto"), []string{`orchestrationType "auto" is invalid`}},
		{"bounds missing", inPlaceDeployment(3, nil, nil, v1alpha1.OrchestrationTypeAuto), []string{"spec.strategy.inPlaceUpdate.maxSurge is required", "spec.strategy.inPlaceUpdate.maxUnavailable is required"}},
		{"bound malformed", inPlaceDeployment(3, one, ptr.To(intstr.FromString("half")), v1alpha1.OrchestrationTypeAuto), []string{`spec.strategy.inPlaceUpdate.maxUnavailable "half"`}},
		{"bound negative", inPlaceDeployment(3, ptr.To(intstr.FromInt32(-1)), one, v1alpha1.OrchestrationTypeAuto), []string{`spec.strategy.inPlaceUpdate.maxSurge "-1" must not be negative`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := validateInPlace(tc.d)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("valid spec refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("invalid spec accepted, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestInPlaceFenceposts(t *testing.T) {
	for _, tc := range []struct {
		name                string
		d                   *v1alpha1.MachineDeployment
		wantSurge, wantUnav int32
	}{
		{"surge up, unavailable down", inPlaceDeployment(10, ptr.To(intstr.FromString("25%")), ptr.To(intstr.FromString("25%")), v1alpha1.OrchestrationTypeAuto), 3, 2},
		{"both 0: one unavailable", inPlaceDeployment(3, ptr.To(intstr.FromInt32(0)), ptr.To(intstr.FromInt32(0)), v1alpha1.OrchestrationTypeAuto), 0, 1},
		{"manual forces surge 0", inPlaceDeployment(3, ptr.To(intstr.FromInt32(2)), ptr.To(intstr.FromInt32(0)), v1alpha1.OrchestrationTypeManual), 0, 1},
		{"manual keeps maxUnavailable", inPlaceDeployment(4, ptr.To(intstr.FromInt32(2)), ptr.To(intstr.FromInt32(2)), v1alpha1.OrchestrationTypeManual), 0, 2},
	} {
		s, u := inPlaceFenceposts(tc.d)
		if s != tc.wantSurge || u != tc.wantUnav {
			t.Errorf("%s: surge %d unavailable %d, want %d/%d", tc.name, s, u, tc.wantSurge, tc.wantUnav)
		}
	}
	// Availability counts maxUnavailable of the in-place strategy; maxSurge of the replica
	// annotations stays 0 for it, as MCM's MaxSurge does.
	d := inPlaceDeployment(4, ptr.To(intstr.FromInt32(1)), ptr.To(intstr.FromInt32(3)), v1alpha1.OrchestrationTypeAuto)
	if got := limitsOf(d, nil, nil).unavailable; got != 3 {
		t.Errorf("maxUnavailable of an in-place deployment %d, want 3", got)
	}
	if got := limitsOf(d, nil, nil).annotationSurge(d); got != 0 {
		t.Errorf("maxSurge of an in-place deployment %d, want 0 (MCM's MaxSurge is RollingUpdate's only)", got)
	}
}

func TestInPlaceNewSetReplicas(t *testing.T) {
	old := &v1alpha1.MachineSet{}
	old.UID, old.Spec.Replicas = "old", 4
	for _, tc := range []struct {
		name string
		d    *v1alpha1.MachineDeployment
		want int32
	}{
		{"auto with maxSurge 2 starts with 2 fresh machines", inPlaceDeployment(4, ptr.To(intstr.FromInt32(2)), ptr.To(intstr.FromInt32(1)), v1alpha1.OrchestrationTypeAuto), 2},
		{"auto without surge starts empty", inPlaceDeployment(4, ptr.To(intstr.FromInt32(0)), ptr.To(intstr.FromInt32(1)), v1alpha1.OrchestrationTypeAuto), 0},
		{"manual starts empty whatever maxSurge", inPlaceDeployment(4, ptr.To(intstr.FromInt32(2)), ptr.To(intstr.FromInt32(1)), v1alpha1.OrchestrationTypeManual), 0},
	} {
		ro := newPlanner(Input{Deployment: tc.d})
		if got := ro.newSetReplicas([]*v1alpha1.MachineSet{old}, nil); got != tc.want {
			t.Errorf("%s: new set of %d replicas, want %d", tc.name, got, tc.want)
		}
	}
}
