package fakeopenstack_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/attributestags"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"

	"github.com/machinist-io/machinist/providers/openstack/fakeopenstack"
)

// The answers below are real OpenStack's (Debian 12's Zed: neutron 21.0.0, glance 25.1.0), seen by
// test/openstack-real's probes, where the fake had answered otherwise (docs/openstack-real.md).

// unexpected returns the status and body of a gophercloud error answer.
func unexpected(t *testing.T, err error) (int, map[string]json.RawMessage) {
	t.Helper()
	var resp gophercloud.ErrUnexpectedResponseCode
	if !errors.As(err, &resp) {
		t.Fatalf("want an error answer, got %v", err)
	}
	body := map[string]json.RawMessage{}
	if err := json.Unmarshal(resp.Body, &body); err != nil {
		t.Fatalf("the error body is not JSON (%v): %s", err, resp.Body)
	}
	return resp.Actual, body
}

func neutronType(t *testing.T, body map[string]json.RawMessage) (kind, msg string) {
	t.Helper()
	var e struct{ Type, Message string }
	if err := json.Unmarshal(body["NeutronError"], &e); err != nil {
		t.Fatalf("no NeutronError in %v", body)
	}
	return e.Type, e.Message
}

func TestNeutronSubnetThatDoesNotExistIsNotFound(t *testing.T) {
	c := startCloud(t, fakeopenstack.Options{})
	cl := connect(t, c, passwordOpts())
	_, err := ports.Create(context.Background(), cl.network, ports.CreateOpts{NetworkID: fakeopenstack.NetworkID,
		FixedIPs: []ports.IP{{SubnetID: "00000000-0000-4000-8000-000000000005"}}}).Extract()
	status, body := unexpected(t, err)
	kind, msg := neutronType(t, body)
	if status != http.StatusNotFound || kind != "SubnetNotFound" || msg != "Subnet 00000000-0000-4000-8000-000000000005 could not be found." {
		t.Errorf("port on a missing subnet: HTTP %d %s %q; real Neutron answers 404 SubnetNotFound \"Subnet <id> could not be found.\"", status, kind, msg)
	}
	// A subnet of another network stays 400 InvalidInput, as in Neutron.
	_, err = ports.Create(context.Background(), cl.network, ports.CreateOpts{NetworkID: fakeopenstack.NetworkID,
		FixedIPs: []ports.IP{{SubnetID: fakeopenstack.PodSubnetID}}}).Extract()
	if status, body := unexpected(t, err); status != http.StatusBadRequest {
		t.Errorf("port on another network's subnet: HTTP %d %v, want 400 InvalidInput", status, body)
	}
}

func TestNeutronTagsOfMissingPort(t *testing.T) {
	c := startCloud(t, fakeopenstack.Options{})
	cl := connect(t, c, passwordOpts())
	_, err := attributestags.ReplaceAll(context.Background(), cl.network, "ports", "00000000-0000-4000-8000-000000000004", attributestags.ReplaceAllOpts{Tags: []string{"a"}}).Extract()
	status, body := unexpected(t, err)
	kind, msg := neutronType(t, body)
	if status != http.StatusNotFound || kind != "TagResourceNotFound" || msg != "Resource ports 00000000-0000-4000-8000-000000000004 could not be found." {
		t.Errorf("tags of a missing port: HTTP %d %s %q; real Neutron answers 404 TagResourceNotFound \"Resource ports <id> could not be found.\"", status, kind, msg)
	}
}

func TestGlanceErrorsAreWebobJSON(t *testing.T) {
	c := startCloud(t, fakeopenstack.Options{})
	cl := connect(t, c, passwordOpts())
	_, err := images.Get(context.Background(), cl.image, "00000000-0000-4000-8000-000000000002").Extract()
	status, body := unexpected(t, err)
	var msg, code, title string
	_ = json.Unmarshal(body["message"], &msg)
	_ = json.Unmarshal(body["code"], &code)
	_ = json.Unmarshal(body["title"], &title)
	if status != http.StatusNotFound || msg != "No image found with ID 00000000-0000-4000-8000-000000000002<br /><br />\n\n\n" || code != "404 Not Found" || title != "Not Found" {
		t.Errorf("missing image: HTTP %d %v; real Glance answers 404 {message: \"No image found with ID <id><br /><br />\\n\\n\\n\", code: \"404 Not Found\", title: \"Not Found\"}", status, body)
	}
}

func TestNeutronUnknownPathIsHTTPNotFound(t *testing.T) {
	c := startCloud(t, fakeopenstack.Options{})
	cl := connect(t, c, passwordOpts())
	_, err := cl.network.Get(context.Background(), cl.network.ServiceURL("v2.0", "ports"), nil, nil)
	status, body := unexpected(t, err)
	if kind, msg := neutronType(t, body); status != http.StatusNotFound || kind != "HTTPNotFound" || msg != "The resource could not be found." {
		t.Errorf("unknown path: HTTP %d %s %q; real Neutron answers 404 HTTPNotFound \"The resource could not be found.\"", status, kind, msg)
	}
}

// Nova shows a 500 fault's details (the traceback) to admins only; a project member, the
// driver's user, reads code, message and created.
func TestNovaFaultDetailsHiddenFromMembers(t *testing.T) {
	c := startCloud(t, fakeopenstack.Options{})
	cl := connect(t, c, passwordOpts())
	c.NoValidHost(1)
	srv, err := servers.Create(context.Background(), cl.compute, servers.CreateOpts{Name: "fault", FlavorRef: fakeopenstack.FlavorSmallID(),
		ImageRef: fakeopenstack.ImageID, Networks: []servers.Network{{UUID: fakeopenstack.NetworkID}}}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	id := srv.ID
	var body struct {
		Server struct {
			Status string
			Fault  map[string]any
		}
	}
	if _, err := cl.compute.Get(context.Background(), cl.compute.ServiceURL("servers", id), &body, nil); err != nil {
		t.Fatal(err)
	}
	if body.Server.Status != "ERROR" || fmt.Sprint(body.Server.Fault["code"]) != "500" {
		t.Fatalf("server %s: status %s fault %v, want ERROR with a 500 fault", id, body.Server.Status, body.Server.Fault)
	}
	if body.Server.Fault["message"] != "No valid host was found. " {
		t.Errorf("fault message %q; real Nova (Zed) says \"No valid host was found. \" when Placement has no candidates", body.Server.Fault["message"])
	}
	if _, ok := body.Server.Fault["details"]; ok {
		t.Errorf("a member reads the fault's details %v; Nova shows them to admins only", body.Server.Fault)
	}
}
