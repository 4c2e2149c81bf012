package openstackreal

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// TestNoValidHost asks for a flavor no host can take: Nova's scheduler puts the server in ERROR
// with the fault "No valid host was found", which the driver reports as ResourceExhausted with
// Nova's own message, leaving nothing behind.
func TestNoValidHost(t *testing.T) {
	need(t)
	t.Parallel()
	spec := simpleSpec(t)
	spec.FlavorName = osr(t, "FLAVOR_NOHOST")
	spec.Tags = map[string]string{"kubernetes.io-cluster-shoot--machinist--nohost": "1", roleKey: "1"}
	class := classOf(t, "real-nohost", spec)
	d, _ := newDriver(t)
	c := userClients(t, osr(t, "PROJECT"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "nohost-0", Namespace: "default"}}
	_, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: passwordSecret(t, osr(t, "PROJECT"))})
	if err == nil {
		t.Fatal("CreateMachine with a flavor no host can take succeeded")
	}
	t.Logf("CreateMachine: %v", err)
	if driver.CodeOf(err) != driver.ResourceExhausted {
		t.Errorf("code %s, want ResourceExhausted", driver.CodeOf(err))
	}
	if !strings.Contains(err.Error(), "No valid host was found") {
		t.Errorf("error %q does not carry Nova's fault message", err)
	}
	// Its own bound: the create may have used most of the first one.
	checkCtx, checkCancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer checkCancel()
	left, lerr := c.leftovers(checkCtx, "kubernetes.io-cluster-shoot--machinist--nohost")
	if lerr != nil || len(left) > 0 {
		t.Errorf("after the failed create the cloud holds %v (%v)", left, lerr)
	}
}
