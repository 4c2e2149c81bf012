package fakeopenstack_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"github.com/machinist-io/machinist/providers/kit/fakekit"
	"github.com/machinist-io/machinist/providers/openstack/fakeopenstack"
)

// TestServerActions: os-stop, os-start, shelve and unshelve take a server through Nova's
// states; an action in a state Nova refuses it in is 409 naming the state; a failed unshelve
// leaves the server SHELVED_OFFLOADED; the journal names each action.
func TestServerActions(t *testing.T) {
	c := fakeopenstack.New(fakeopenstack.Options{})
	fakekit.Start(t, c)
	cl := connect(t, c, passwordOpts())
	ctx := context.Background()
	id := c.CreateServer("m-1", nil)
	status := func() (string, string) {
		s, err := servers.Get(ctx, cl.compute, id).Extract()
		if err != nil {
			t.Fatal(err)
		}
		return s.Status, s.TaskState
	}
	conflict := func(err error, want string) {
		t.Helper()
		if !gophercloud.ResponseCodeIs(err, http.StatusConflict) || !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v; want 409 naming %q", err, want)
		}
	}
	conflict(servers.Start(ctx, cl.compute, id).ExtractErr(), "while it is in vm_state active")
	c.SetPowerTimes(fakeopenstack.PowerTimes{Stop: time.Hour})
	if err := servers.Stop(ctx, cl.compute, id).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if s, task := status(); s != "ACTIVE" || task != "powering-off" {
		t.Fatalf("after os-stop: %s/%s; want ACTIVE/powering-off", s, task)
	}
	conflict(servers.Shelve(ctx, cl.compute, id).ExtractErr(), "while it is in task_state powering-off")

	c2 := fakeopenstack.New(fakeopenstack.Options{})
	fakekit.Start(t, c2)
	cl = connect(t, c2, passwordOpts())
	id = c2.CreateServer("m-2", nil)
	c = c2
	for _, step := range []struct {
		call       func() error
		status     string
		vmState    string
		powerState int
	}{
		{func() error { return servers.Stop(ctx, cl.compute, id).ExtractErr() }, "SHUTOFF", "stopped", 4},
		{func() error { return servers.Start(ctx, cl.compute, id).ExtractErr() }, "ACTIVE", "active", 1},
		{func() error { return servers.Shelve(ctx, cl.compute, id).ExtractErr() }, "SHELVED_OFFLOADED", "shelved_offloaded", 0},
		{func() error { return servers.Unshelve(ctx, cl.compute, id, servers.UnshelveOpts{}).ExtractErr() }, "ACTIVE", "active", 1},
	} {
		if err := step.call(); err != nil {
			t.Fatal(err)
		}
		s, err := servers.Get(ctx, cl.compute, id).Extract()
		if err != nil {
			t.Fatal(err)
		}
		if s.Status != step.status || s.VmState != step.vmState || int(s.PowerState) != step.powerState || s.TaskState != "" {
			t.Fatalf("server is %s/%s/%d task %q; want %s/%s/%d", s.Status, s.VmState, s.PowerState, s.TaskState, step.status, step.vmState, step.powerState)
		}
		if len(s.Addresses) == 0 {
			t.Fatalf("server %s lost its addresses", s.Status)
		}
	}
	if err := servers.Shelve(ctx, cl.compute, id).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	c.NoValidHostOnUnshelve(1)
	if err := servers.Unshelve(ctx, cl.compute, id, servers.UnshelveOpts{}).ExtractErr(); err != nil {
		t.Fatalf("unshelve = %v; want 202: the scheduling fails later", err)
	}
	if s, task := status(); s != "SHELVED_OFFLOADED" || task != "" {
		t.Fatalf("after an unshelve without a host: %s/%q; want SHELVED_OFFLOADED without a task", s, task)
	}
	var actions []string
	for _, r := range c.Requests.For(fakeopenstack.OpServerAction) {
		actions = append(actions, r.Action)
	}
	if got := strings.Join(actions, ","); got != "os-stop,os-start,shelve,unshelve,shelve,unshelve" {
		t.Fatalf("journal actions %s", got)
	}
}

// TestWaitReady: a first boot is Ready after FirstBoot; a start after Start and Resume; a
// SHUTOFF server never becomes Ready.
func TestWaitReady(t *testing.T) {
	c := fakeopenstack.New(fakeopenstack.Options{})
	fakekit.Start(t, c)
	cl := connect(t, c, passwordOpts())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c.SetPowerTimes(fakeopenstack.PowerTimes{FirstBoot: 40 * time.Millisecond, Start: 20 * time.Millisecond, Resume: 10 * time.Millisecond})
	began := time.Now() // before the server exists: the wait is at least FirstBoot from here
	id := c.CreateServer("m-1", nil)
	if err := c.WaitReady(ctx, id); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < 40*time.Millisecond {
		t.Fatalf("first boot Ready after %s; want at least FirstBoot (40ms)", took)
	}
	if err := servers.Stop(ctx, cl.compute, id).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, id); err == nil || !strings.Contains(err.Error(), "SHUTOFF") {
		t.Fatalf("WaitReady of a SHUTOFF server = %v; want an error naming SHUTOFF", err)
	}
	began = time.Now()
	if err := servers.Start(ctx, cl.compute, id).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, id); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < 30*time.Millisecond {
		t.Fatalf("resume Ready after %s; want about Start+Resume (30ms)", took)
	}
}
