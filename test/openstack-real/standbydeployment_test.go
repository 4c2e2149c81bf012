package openstackreal

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/standby"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/harness/testenv"
)

// TestStandbyDeployment runs `machinist run` on a real kube-apiserver against the real Nova: a
// MachineDeployment of 0 with machinist.io/standby: "2" gets two standby machines whose servers
// boot once and are stopped (SHUTOFF); a scale-up by 2 claims both and Nova starts them
// (os-start: the same servers, ACTIVE again, no new server); scaled to 0 with standby 0, no
// machine and no server, port or volume of the test's cluster is left.
func TestStandbyDeployment(t *testing.T) {
	need(t)
	t.Parallel()
	const cluster = "kubernetes.io-cluster-shoot--machinist--standby-md"
	env := testenv.Start(t)
	c := env.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	nova := userClients(t, osr(t, "PROJECT"))

	create(t, ctx, c, passwordSecret(t, osr(t, "PROJECT")))
	spec := simpleSpec(t)
	spec.Tags = map[string]string{cluster: "1", roleKey: "1"}
	create(t, ctx, c, classOf(t, "real-standby-md", spec))
	md := machinetest.Deployment(ns, "real-standby", "real-standby-md", 0, machinetest.Pool("real-standby"), 1, 0)
	md.Annotations = map[string]string{standby.Annotation: "2"}
	create(t, ctx, c, md)
	startRun(t, env.KubeconfigPath)
	go standInKubelet(ctx, t, c)

	list := func(ctx context.Context) ([]v1alpha1.Machine, error) {
		l := &v1alpha1.MachineList{}
		err := c.List(ctx, l, client.InNamespace(ns))
		sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Name < l.Items[j].Name })
		return l.Items, err
	}
	describe := func(ms []v1alpha1.Machine) string {
		var s []string
		for _, m := range ms {
			s = append(s, fmt.Sprintf("%s %s standby=%q state=%q %s", m.Name, m.Status.CurrentStatus.Phase,
				m.Annotations[standby.Annotation], m.Annotations[standby.AnnotationState], m.Status.LastOperation.Description))
		}
		return strings.Join(s, "; ")
	}

	// Two stopped standby machines; their servers SHUTOFF.
	stoppedIDs := map[string]string{} // machine → providerID
	eventually(t, 15*time.Minute, "2 stopped standby machines", func(ctx context.Context) (bool, string) {
		ms, err := list(ctx)
		if err != nil {
			return false, err.Error()
		}
		clear(stoppedIDs)
		for _, m := range ms {
			if m.Annotations[standby.AnnotationState] == string(standby.Stopped) && m.DeletionTimestamp == nil {
				stoppedIDs[m.Name] = m.Spec.ProviderID
			}
		}
		return len(ms) == 2 && len(stoppedIDs) == 2, describe(ms)
	})
	for _, pid := range stoppedIDs {
		waitServer(t, ctx, nova, pid[len(pid)-36:], "SHUTOFF")
	}

	// Scale up by 2: both claimed and started by Nova, the same servers, none created.
	scale(t, ctx, c, md.Name, 2)
	eventually(t, 10*time.Minute, "the 2 standby machines Running in the set", func(ctx context.Context) (bool, string) {
		ms, err := machinesOf(ctx, c, md.Name)
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for _, m := range ms {
			if _, was := stoppedIDs[m.Name]; was && m.Spec.ProviderID == stoppedIDs[m.Name] && m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning {
				n++
			}
		}
		return n == 2 && len(ms) == 2, describe(ms)
	})
	for name, pid := range stoppedIDs {
		waitServer(t, ctx, nova, pid[len(pid)-36:], "ACTIVE")
		if n, err := nova.serversNamed(ctx, name); err != nil || n != 1 {
			t.Errorf("%d servers named %s (%v); want 1, the started one", n, name, err)
		}
	}
	events := &corev1.EventList{}
	if err := c.List(ctx, events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	resumed := map[string]bool{}
	for _, e := range events.Items {
		if e.Reason == "StandbyResumed" {
			resumed[e.InvolvedObject.Name] = true
		}
		if e.Reason == "StandbyFreshCreate" {
			t.Errorf("a start fell back to a create: %s: %s", e.InvolvedObject.Name, e.Message)
		}
	}
	for name := range stoppedIDs {
		if !resumed[name] {
			t.Errorf("no StandbyResumed event for %s (events of %v)", name, resumed)
		}
	}

	// Scale to 0 with standby 0: nothing left, in the API or the cloud.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := &v1alpha1.MachineDeployment{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: md.Name}, d); err != nil {
			return err
		}
		d.Spec.Replicas, d.Annotations[standby.Annotation] = 0, "0"
		return c.Update(ctx, d)
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Minute, "every machine gone", func(ctx context.Context) (bool, string) {
		ms, err := list(ctx)
		if err != nil {
			return false, err.Error()
		}
		return len(ms) == 0, describe(ms)
	})
	if left, err := nova.leftovers(ctx, cluster); err != nil || len(left) > 0 {
		t.Errorf("after scaling to 0 with standby 0 the cloud holds %v (%v)", left, err)
	}
}
