package fakeopenstack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"
)

// Stopping, starting, shelving and unshelving servers, as Nova's server actions do it
// (POST /servers/{id}/action): os-stop takes an ACTIVE server through task_state powering-off
// to SHUTOFF, os-start a SHUTOFF one through powering-on to ACTIVE; shelve takes an ACTIVE or
// SHUTOFF server through shelving (and shelving_offloading) to SHELVED_OFFLOADED, which frees
// its hypervisor (Nova's default shelved_offload_time is 0, so SHELVED lasts only OffloadTime);
// unshelve schedules it again (task_state unshelving, status still SHELVED_OFFLOADED) and boots
// it to ACTIVE. When the scheduler finds no host for an unshelve, Nova's conductor puts the
// server back to SHELVED_OFFLOADED with no task state and records no fault on it
// (nova/conductor/manager.py unshelve_instance catches NoValidHost). An action in a state Nova
// does not allow it in is 409 "Cannot '<action>' instance <id> while it is in vm_state <state>"
// (or task_state, while another action runs). Ports, fixed IPs and volumes stay with the server
// throughout; a shelve of an image-backed server would also upload a snapshot to Glance, which
// the fake does not model.

// PowerTimes are how long the power actions and a node's boots take, in real time.
type PowerTimes struct {
	// FirstBoot is the time from ACTIVE to a Ready node on a server's first boot: the OS boots,
	// the node bootstraps (cloud-init, kubelet, join) and pulls its images.
	FirstBoot time.Duration `json:"firstBoot,omitempty"`
	// Stop is how long os-stop stays in powering-off; Start how long os-start stays in
	// powering-on.
	Stop  time.Duration `json:"stop,omitempty"`
	Start time.Duration `json:"start,omitempty"`
	// Shelve is how long shelve stays in shelving; Offload how long the server then stays SHELVED
	// (shelving_offloading) before it is SHELVED_OFFLOADED.
	Shelve  time.Duration `json:"shelve,omitempty"`
	Offload time.Duration `json:"offload,omitempty"`
	// Unshelve is how long unshelve stays in unshelving (scheduling, spawning) before ACTIVE.
	Unshelve time.Duration `json:"unshelve,omitempty"`
	// Resume is the time from ACTIVE to a Ready node after os-start or unshelve: the OS boots
	// and the kubelet rejoins; bootstrap was done at first boot.
	Resume time.Duration `json:"resume,omitempty"`
}

// SetPowerTimes sets how long power actions and boots take.
func (c *Cloud) SetPowerTimes(t PowerTimes) { c.st.mu.Lock(); c.st.power = t; c.st.mu.Unlock() }

// NoValidHostOnUnshelve makes the scheduler find no host for the next n unshelves: each server
// returns to SHELVED_OFFLOADED without a task state, as Nova's conductor leaves it.
func (c *Cloud) NoValidHostOnUnshelve(n int) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.failUnshelves += n
}

// powerTask is an action under way on a server.
type powerTask struct {
	action string    // os-stop, os-start, shelve, unshelve
	done   time.Time // when its current step ends
}

// serverAction answers POST /servers/{id}/action for the power actions. Callers hold c.mu.
func (c *nova) serverAction(w http.ResponseWriter, r *http.Request, id string) {
	s := c.servers[id]
	if s == nil || s.deleting {
		writeError(w, "compute", http.StatusNotFound, "", fmt.Sprintf("Instance %s could not be found.", id))
		return
	}
	action, ok := actionOf(r)
	if !ok {
		writeError(w, "compute", http.StatusBadRequest, "", "Malformed request body")
		return
	}
	allowed := map[string][]string{
		"os-stop":  {"active", "error"},
		"os-start": {"stopped"},
		"shelve":   {"active", "stopped"},
		"unshelve": {"shelved", "shelved_offloaded"},
	}[action]
	if allowed == nil {
		writeError(w, "compute", http.StatusBadRequest, "", fmt.Sprintf("There is no such action: %s", action))
		return
	}
	conflict := func(attr, state string) {
		writeError(w, "compute", http.StatusConflict, "", fmt.Sprintf("Cannot '%s' instance %s while it is in %s %s", action, id, attr, state))
	}
	if s.TaskState != "" {
		conflict("task_state", s.TaskState)
		return
	}
	if !slices.Contains(allowed, s.VMState) {
		conflict("vm_state", s.VMState)
		return
	}
	now := c.now()
	s.task = &powerTask{action: action}
	switch action {
	case "os-stop":
		s.TaskState, s.task.done = "powering-off", now.Add(c.power.Stop)
	case "os-start":
		s.TaskState, s.task.done = "powering-on", now.Add(c.power.Start)
	case "shelve":
		s.TaskState, s.task.done = "shelving", now.Add(c.power.Shelve)
	case "unshelve":
		s.TaskState, s.task.done = "unshelving", now.Add(c.power.Unshelve)
	}
	c.advance()
	w.WriteHeader(http.StatusAccepted)
}

// advancePower moves a server's action on when its step is due. Callers hold c.mu.
func (c *state) advancePower(s *Server, now time.Time) {
	for s.task != nil && !now.Before(s.task.done) {
		t := s.task
		switch {
		case t.action == "os-stop":
			c.settle(s, "SHUTOFF", "stopped", 4)
		case t.action == "os-start":
			c.settle(s, "ACTIVE", "active", 1)
			s.activeAt, s.resumes = t.done, s.resumes+1
		case t.action == "shelve" && s.TaskState == "shelving":
			s.Status, s.VMState, s.PowerState, s.TaskState = "SHELVED", "shelved", 4, "shelving_offloading"
			t.done = t.done.Add(c.power.Offload)
		case t.action == "shelve":
			c.settle(s, "SHELVED_OFFLOADED", "shelved_offloaded", 0)
		case t.action == "unshelve" && c.failUnshelves > 0:
			c.failUnshelves--
			s.TaskState, s.task = "", nil
		case t.action == "unshelve":
			c.settle(s, "ACTIVE", "active", 1)
			s.activeAt, s.resumes = t.done, s.resumes+1
		}
	}
}

func (c *state) settle(s *Server, status, vmState string, power int) {
	s.Status, s.VMState, s.PowerState, s.TaskState, s.task = status, vmState, power, "", nil
}

// actionOf reads the action of a server action body: its only key.
func actionOf(r *http.Request) (string, bool) {
	var body map[string]json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body) != 1 {
		return "", false
	}
	for k := range body {
		return k, true
	}
	return "", false
}

// peekAction reads the action of a server action request for the journal, leaving the body
// for the service.
func peekAction(r *http.Request) string {
	if r.Method != http.MethodPost || r.Body == nil {
		return ""
	}
	raw, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(raw))
	if err != nil {
		return ""
	}
	var body map[string]json.RawMessage
	if json.Unmarshal(raw, &body) != nil || len(body) != 1 {
		return ""
	}
	for k := range body {
		return k
	}
	return ""
}

// WaitReady waits until the node on server id would be Ready (ACTIVE and its boot done:
// PowerTimes), and fails when the server is not on its way there (SHUTOFF, shelved, gone) or
// ctx ends.
func (c *Cloud) WaitReady(ctx context.Context, id string) error {
	for {
		due, err := c.st.untilReady(id)
		if err != nil || due <= 0 {
			return err
		}
		t := time.NewTimer(due)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (c *state) untilReady(id string) (time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advance()
	s := c.servers[id]
	if s == nil {
		return 0, fmt.Errorf("fakeopenstack: server %s does not exist", id)
	}
	now := c.now()
	switch {
	case s.Status == "BUILD":
		return max(s.buildDone.Sub(now), time.Millisecond), nil
	case s.task != nil && (s.task.action == "os-start" || s.task.action == "unshelve"):
		return max(s.task.done.Sub(now), time.Millisecond), nil
	case s.Status == "ACTIVE" && s.task == nil:
		boot := c.power.FirstBoot
		if s.resumes > 0 {
			boot = c.power.Resume
		}
		return max(s.activeAt.Add(boot).Sub(now), 0), nil
	}
	return 0, fmt.Errorf("fakeopenstack: server %s is %s (task %q): its node will not become Ready", id, s.Status, s.TaskState)
}
