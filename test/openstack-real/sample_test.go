package openstackreal

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/portsbinding"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/harness/localcontrolplane"
)

// gardenerSample reads Gardener's published OpenStack MachineClass
// (providers/openstack/testdata/gardener-published) and replaces only its IDs — the image and the
// network — with this cloud's. Its region, zone, flavor, key pair and security group names exist
// in this cloud as the sample spells them (openstack.sh seeds them).
func gardenerSample(t testing.TB) *v1alpha1.MachineClass {
	t.Helper()
	root, err := localcontrolplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "providers/openstack/testdata/gardener-published/machine-class.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	for old, id := range map[string]string{
		"a40dff99-e78a-4c83-af12-26b97e13fc9f": osr(t, "IMAGE_ID"),
		"378c4e98-dcf9-438a-bf7f-89d964d18793": osr(t, "NETWORK_ID"),
	} {
		if !strings.Contains(text, old) {
			t.Fatalf("Gardener's sample no longer holds ID %s: update this test", old)
		}
		text = strings.ReplaceAll(text, old, id)
	}
	class := &v1alpha1.MachineClass{}
	if err := yaml.UnmarshalStrict([]byte(text), class); err != nil {
		t.Fatalf("decode Gardener's sample: %v", err)
	}
	return class
}

// TestGardenerSample creates, reads, lists and deletes a machine of Gardener's published sample
// class, checking each step in Nova and Neutron directly.
func TestGardenerSample(t *testing.T) {
	need(t)
	t.Parallel()
	class := gardenerSample(t)
	secret := passwordSecret(t, osr(t, "PROJECT"))
	d, _ := newDriver(t)
	c := userClients(t, osr(t, "PROJECT"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "gardener-sample-0", Namespace: class.Namespace}}

	created, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: secret})
	if err != nil {
		t.Fatalf("CreateMachine: %v", err)
	}
	t.Logf("created %s (node %s, addresses %v)", created.ProviderID, created.NodeName, created.Addresses)
	if !strings.HasPrefix(created.ProviderID, "openstack:///"+osr(t, "REGION")+"/") || created.NodeName != m.Name || len(created.Addresses) == 0 {
		t.Errorf("CreateMachine returned %+v: want provider ID openstack:///%s/<id>, node %s and the fixed IP", created, osr(t, "REGION"), m.Name)
	}
	serverID := created.ProviderID[strings.LastIndex(created.ProviderID, "/")+1:]

	// servers.Server decodes itself (its UnmarshalJSON would be promoted past any field added
	// around it), and it carries OS-EXT-AZ:availability_zone, which Nova shows to members.
	srv, err := servers.Get(ctx, c.compute, serverID).Extract()
	if err != nil {
		t.Fatalf("Nova does not show server %s: %v", serverID, err)
	}
	if srv.Status != "ACTIVE" || srv.AvailabilityZone != "eu-nl-1b" || srv.Metadata["kubernetes.io-cluster-shoot--foobar--openstack"] != "1" || srv.Metadata["kubernetes.io-role-node"] != "1" {
		t.Errorf("Nova shows server %s as status %s, zone %q, metadata %v: want ACTIVE in eu-nl-1b with the class's tags", serverID, srv.Status, srv.AvailabilityZone, srv.Metadata)
	}
	if srv.KeyName != "shoot--foobar--openstack" {
		t.Errorf("server key pair %q, want the sample's shoot--foobar--openstack", srv.KeyName)
	}
	// The port Nova made carries the pod CIDR the sample allows and is bound to the compute host.
	pages, err := ports.List(c.network, ports.ListOpts{DeviceID: serverID}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := ports.ExtractPorts(pages)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 {
		t.Fatalf("server %s has %d ports, want 1", serverID, len(ps))
	}
	p := ps[0]
	if len(p.AllowedAddressPairs) != 1 || p.AllowedAddressPairs[0].IPAddress != "100.96.0.0/11" {
		t.Errorf("port %s allows %v, want the sample's podNetworkCidr 100.96.0.0/11", p.ID, p.AllowedAddressPairs)
	}
	// Neutron shows the binding to admins only; decoded on its own, as ports.Port decodes itself.
	var binding portsbinding.PortsBindingExt
	if err := ports.Get(ctx, adminNetwork(t), p.ID).ExtractInto(&binding); err != nil {
		t.Fatalf("read port %s as admin: %v", p.ID, err)
	}
	if binding.VIFType == "" || binding.VIFType == "binding_failed" || binding.VIFType == "unbound" || binding.HostID == "" {
		t.Errorf("port %s of the server is not bound: vif_type %q host %q", p.ID, binding.VIFType, binding.HostID)
	}

	status, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: class, Secret: secret})
	if err != nil || status.ProviderID != created.ProviderID {
		t.Errorf("GetMachineStatus = %+v, %v; want %s", status, err, created.ProviderID)
	}
	list, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class, Secret: secret})
	if err != nil || list.MachineList[created.ProviderID] != m.Name {
		t.Errorf("ListMachines = %+v, %v; want %s -> %s", list, err, created.ProviderID, m.Name)
	}

	withID := m.DeepCopy()
	withID.Spec.ProviderID = created.ProviderID
	if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: withID, MachineClass: class, Secret: secret}); err != nil {
		t.Fatalf("DeleteMachine: %v", err)
	}
	if _, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: class, Secret: secret}); driver.CodeOf(err) != driver.NotFound {
		t.Errorf("GetMachineStatus after delete: %v, want NotFound", err)
	}
	if _, err := ports.Get(ctx, c.network, p.ID).Extract(); err == nil {
		t.Errorf("port %s of the deleted server still exists", p.ID)
	}
	left, err := c.leftovers(ctx, "kubernetes.io-cluster-shoot--foobar--openstack")
	if err != nil || len(left) > 0 {
		t.Errorf("after DeleteMachine the cloud holds %v (%v)", left, err)
	}
}
