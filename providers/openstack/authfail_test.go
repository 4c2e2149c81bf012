package openstack

import (
	"strings"
	"testing"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/openstack/fakeopenstack"
)

// TestUnknownApplicationCredential: Keystone answers an unknown application credential ID with
// 404 and quotes the ID (seen on real Keystone, Zed: ApplicationCredentialNotFound; the fake
// answers so). The driver reports Unauthenticated, never NotFound (a DeleteMachine answered
// NotFound tells the controllers the VM is gone), and names the secret's key, not the ID.
func TestUnknownApplicationCredential(t *testing.T) {
	cloud := startCloud(t, fakeopenstack.Options{})
	d, _ := testDriver(t)
	secret := appCredSecret(cloud)
	const wrongID = "4f0c9a1e2b7d4c1f9e8a7b6c5d4e3f21"
	secret.Data[KeyApplicationCredentialID] = []byte(wrongID)
	class := testClass(t)
	_, err := d.CreateMachine(ctxT(t), &driver.CreateMachineRequest{Machine: machine("wrong-appcred"), MachineClass: class, Secret: secret})
	if driver.CodeOf(err) != driver.Unauthenticated || strings.Contains(err.Error(), wrongID) || !strings.Contains(err.Error(), "<"+KeyApplicationCredentialID+">") {
		t.Fatalf("CreateMachine with an unknown application credential: %v; want Unauthenticated naming the key, not the ID", err)
	}
	_, err = d.DeleteMachine(ctxT(t), &driver.DeleteMachineRequest{Machine: withProviderID(machine("wrong-appcred"), "openstack:///RegionOne/5c1a"), MachineClass: class, Secret: secret})
	if driver.CodeOf(err) != driver.Unauthenticated {
		t.Fatalf("DeleteMachine with an unknown application credential: %v; want Unauthenticated (NotFound would drop the machine)", err)
	}
}
