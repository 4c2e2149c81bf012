package machinedeployment_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/internal/eventually"
)

// TestInPlaceUpdateSpecProblems: an InPlaceUpdate deployment whose strategy is incomplete, or
// that the controller cannot update in place (no target cluster: the nodes are the protocol),
// is ReplicaFailure=InvalidSpec with a message naming the problem, and no MachineSet is made.
// The in-place rollout itself runs end to end in test/e2e (TestInPlaceUpdate*).
func TestInPlaceUpdateSpecProblems(t *testing.T) {
	e := newEnv(t)
	e.startControllers()
	inPlace := func(name string, ip *v1alpha1.InPlaceUpdateMachineDeployment) {
		d := e.deployment(name, 2, "c", 0, 1)
		d.Spec.Strategy = v1alpha1.MachineDeploymentStrategy{Type: v1alpha1.InPlaceUpdateMachineDeploymentStrategyType, InPlaceUpdate: ip}
		e.create(d)
	}
	one := ptr.To(intstr.FromInt32(1))
	inPlace("no-orchestration", &v1alpha1.InPlaceUpdateMachineDeployment{UpdateConfiguration: v1alpha1.UpdateConfiguration{MaxSurge: one, MaxUnavailable: one}})
	inPlace("no-bounds", &v1alpha1.InPlaceUpdateMachineDeployment{OrchestrationType: v1alpha1.OrchestrationTypeAuto})
	inPlace("no-target", &v1alpha1.InPlaceUpdateMachineDeployment{UpdateConfiguration: v1alpha1.UpdateConfiguration{MaxSurge: one, MaxUnavailable: one}, OrchestrationType: v1alpha1.OrchestrationTypeManual})

	for name, want := range map[string]string{
		"no-orchestration": "spec.strategy.inPlaceUpdate.orchestrationType",
		"no-bounds":        "spec.strategy.inPlaceUpdate.maxSurge is required",
		"no-target":        "needs the target cluster's nodes",
	} {
		eventually.Explained(e.t, 10*time.Second, name+" InvalidSpec", func() (bool, string) {
			d := &v1alpha1.MachineDeployment{}
			if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, d); err != nil {
				return false, err.Error()
			}
			c := condition(d, v1alpha1.MachineDeploymentReplicaFailure)
			return c != nil && c.Reason == "InvalidSpec" && strings.Contains(c.Message, want), fmt.Sprintf("%+v", c)
		})
	}
	for _, ms := range e.sets() {
		t.Errorf("a deployment that cannot be rolled out made machine set %s", ms.Name)
	}
}
