package poolpolicy_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/rollout"
	"github.com/machinist-io/machinist/internal/eventually"
)

// TestSoakHoldsTheNextStep: with healthGate.soakSeconds 4, a deployment of the pool takes its
// next step only once every new machine of it has been Ready for 4 s (AKS's node soak). Read
// from the machines' own timestamps, as the gate reads them (rollout.ReadySince, whole
// seconds): in each zone the second new machine is created at least 4 s after the first became
// Ready. Without the gate it follows within about a second or two (the other zones' steps
// between them), and the pool's status never says it soaks.
func TestSoakHoldsTheNextStep(t *testing.T) {
	const soakSeconds = 4
	e := newEnv(t)
	p := e.pool(func(p *machinistv1alpha1.PoolPolicy) { p.Spec.Rollout.HealthGate.SoakSeconds = soakSeconds })
	e.changeClass("class-b")
	soaked := ""
	eventually.Explained(t, 180*time.Second, "every machine replaced by a Running class-b machine", func() (bool, string) {
		for _, d := range e.policy(p).Status.Deployments {
			if soaked == "" && strings.Contains(d.Message, "soakSeconds") {
				soaked = d.Name + ": " + d.Message
			}
		}
		allA, _ := e.count("class-a")
		allB, runB := e.count("class-b")
		return allA == 0 && allB == 6 && runB == 6, fmt.Sprintf("class-a %d, class-b %d (%d Running); %s", allA, allB, runB, e.progress(p))
	})
	if soaked == "" {
		t.Error("the pool's status never said a deployment soaks")
	} else {
		t.Logf("status while soaking: %s", soaked)
	}
	for _, z := range zones {
		var fresh []v1alpha1.Machine
		for _, m := range e.machines() {
			if m.Spec.Class.Name == "class-b" && strings.HasPrefix(m.Name, z+"-") {
				fresh = append(fresh, m)
			}
		}
		if len(fresh) != 2 {
			t.Fatalf("%s has %d class-b machines, want 2", z, len(fresh))
		}
		sort.Slice(fresh, func(i, j int) bool { return fresh[i].CreationTimestamp.Before(&fresh[j].CreationTimestamp) })
		first, second := fresh[0], fresh[1]
		ready, ok := rollout.ReadySince(&first)
		if !ok {
			t.Fatalf("%s is not Ready", first.Name)
		}
		if gap := second.CreationTimestamp.Sub(ready); gap < soakSeconds*time.Second {
			t.Errorf("%s: %s created %s after %s became Ready, want at least %ds (healthGate.soakSeconds)",
				z, second.Name, gap, first.Name, soakSeconds)
		}
	}
}
