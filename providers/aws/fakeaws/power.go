package fakeaws

import (
	"context"
	"encoding/xml"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Stopping and starting instances, as EC2 does it: StopInstances takes a running instance
// through stopping to stopped (with Hibernate, only one launched with hibernation configured;
// its state reason is then Client.UserInitiatedHibernate), StartInstances takes a stopped one
// through pending to running again, keeping its ID, private IP, DNS name and volumes. A
// stopped on-demand instance gives its host back: starting it needs the zone's capacity again
// (InsufficientInstanceCapacity, HTTP 500, when there is none). EC2 refuses to stop an instance
// of a one-time spot request, to stop a pending one, and to start one that is stopping,
// shutting down or terminated (IncorrectInstanceState).

// BootDelays are how long an instance's power transitions and its node's boots take, on the
// cloud's clock. They model what a machine waits for from a scale-up to a Ready node.
type BootDelays struct {
	// FirstBoot is the time from running to a Ready node on an instance's first boot: the OS
	// boots, the node bootstraps (cloud-init, kubelet, join) and pulls its images.
	FirstBoot time.Duration `json:"firstBoot,omitempty"`
	// Stopping is how long an instance stays stopping before it is stopped.
	Stopping time.Duration `json:"stopping,omitempty"`
	// Hibernating is how long a hibernating instance stays stopping (its memory is written to
	// the root volume); 0 takes Stopping.
	Hibernating time.Duration `json:"hibernating,omitempty"`
	// Starting is how long a started instance stays pending before it runs.
	Starting time.Duration `json:"starting,omitempty"`
	// Resume is the time from running to a Ready node after a start: the OS boots again (or
	// resumes from hibernation) and the kubelet rejoins; bootstrap was done at first boot.
	Resume time.Duration `json:"resume,omitempty"`
	// ResumeHibernated is Resume after a hibernation; 0 takes Resume.
	ResumeHibernated time.Duration `json:"resumeHibernated,omitempty"`
}

// SetBootDelays sets the delays of first boots, stops and starts (SetStartDelay is how long a
// launched instance stays pending).
func (c *Cloud) SetBootDelays(d BootDelays) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.boot = d
}

// power is what an instance's stops and starts leave on it.
type power struct {
	Hibernation bool      `json:",omitempty"` // launched with HibernationOptions.Configured
	Hibernated  bool      `json:",omitempty"` // its last stop was a hibernation
	StoppingAt  time.Time `json:",omitzero"`
	StartedAt   time.Time `json:",omitzero"`  // of the last StartInstances
	RunningAt   time.Time `json:",omitzero"`  // when it last reached running
	Starts      int       `json:",omitempty"` // StartInstances that took it from stopped
}

type stopInstancesResponse struct {
	XMLName      xml.Name         `xml:"StopInstancesResponse"`
	Xmlns        string           `xml:"xmlns,attr"`
	RequestID    string           `xml:"requestId"`
	InstancesSet []xmlStateChange `xml:"instancesSet>item"`
}

type startInstancesResponse struct {
	XMLName      xml.Name         `xml:"StartInstancesResponse"`
	Xmlns        string           `xml:"xmlns,attr"`
	RequestID    string           `xml:"requestId"`
	InstancesSet []xmlStateChange `xml:"instancesSet>item"`
}

// knownInstancesLocked checks the InstanceId list of a state change: present, well formed,
// every instance known.
func (c *instancesAPI) knownInstancesLocked(p params) ([]string, *apiError) {
	ids := p.list("InstanceId")
	if len(ids) == 0 {
		return nil, badRequest("MissingParameter", "The request must contain the parameter InstanceId")
	}
	var missing []string
	for _, id := range ids {
		if err := checkID(id, "i", "InvalidInstanceID.Malformed"); err != nil {
			return nil, err
		}
		if c.instances[id] == nil {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return nil, badRequest("InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", strings.Join(missing, ", "))
	}
	return ids, nil
}

func (c *instancesAPI) stopInstances(p params) (any, *apiError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked()
	ids, apiErr := c.knownInstancesLocked(p)
	if apiErr != nil {
		return nil, apiErr
	}
	hibernate, _ := p.boolean("Hibernate")
	force, _ := p.boolean("Force")
	// EC2 checks every instance before it changes any.
	for _, id := range ids {
		i := c.instances[id]
		switch {
		case i.State == StatePending || i.State == StateShuttingDown || i.State == StateTerminated:
			return nil, badRequest("IncorrectInstanceState", "This instance '%s' is not in a state from which it can be stopped.", id)
		case i.Lifecycle == "spot":
			return nil, badRequest("UnsupportedOperation", "You can't stop the Spot Instance '%s' because it is associated with a one-time Spot Instance request. You can only stop Spot Instances associated with persistent Spot Instance requests.", id)
		case hibernate && !i.Hibernation && i.State == StateRunning:
			return nil, badRequest("UnsupportedHibernationConfiguration", "The instance can't be hibernated because it was not configured at launch for hibernation: %s", id)
		}
	}
	resp := &stopInstancesResponse{Xmlns: ec2Namespace}
	now := c.clock.Now()
	for _, id := range ids {
		i := c.instances[id]
		prev := i.State
		if i.State == StateRunning {
			i.State, i.StoppingAt, i.Hibernated = StateStopping, now, hibernate
			i.StateReason = "Client.UserInitiatedShutdown"
			if hibernate {
				i.StateReason = "Client.UserInitiatedHibernate"
			}
			if force {
				// A forced stop skips the OS's shutdown (and a hibernation's memory dump).
				i.StoppingAt = now.Add(-c.stoppingDelayLocked(i))
			}
		}
		resp.InstancesSet = append(resp.InstancesSet, xmlStateChange{InstanceID: id,
			CurrentState: xmlState{Code: stateCodes[i.State], Name: i.State}, PreviousState: xmlState{Code: stateCodes[prev], Name: prev}})
	}
	c.advanceLocked()
	return resp, nil
}

func (c *instancesAPI) startInstances(p params) (any, *apiError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked()
	ids, apiErr := c.knownInstancesLocked(p)
	if apiErr != nil {
		return nil, apiErr
	}
	need := map[string]int{}
	for _, id := range ids {
		i := c.instances[id]
		switch i.State {
		case StateStopping, StateShuttingDown, StateTerminated:
			return nil, badRequest("IncorrectInstanceState", "The instance '%s' is not in a state from which it can be started.", id)
		case StateStopped:
			if i.Reservation == "" {
				need[i.Zone]++
			}
		}
	}
	for zone, n := range need {
		if left, limited := c.zoneCap[zone]; limited && left < n {
			itype := c.instances[ids[0]].InstanceType
			return nil, errf(http.StatusInternalServerError, "InsufficientInstanceCapacity",
				"Insufficient capacity. We currently do not have sufficient %s capacity in the Availability Zone you requested (%s). Our system will be working on provisioning additional capacity. You can currently get %s capacity by not specifying an Availability Zone in your request or choosing %s.",
				itype, zone, itype, strings.Join(c.otherZonesLocked(zone), ", "))
		}
	}
	resp := &startInstancesResponse{Xmlns: ec2Namespace}
	now := c.clock.Now()
	for _, id := range ids {
		i := c.instances[id]
		prev := i.State
		if i.State == StateStopped {
			i.State, i.StartedAt, i.StateReason = StatePending, now, ""
			i.Starts++
			if _, limited := c.zoneCap[i.Zone]; limited && i.Reservation == "" {
				c.zoneCap[i.Zone]--
			}
		}
		resp.InstancesSet = append(resp.InstancesSet, xmlStateChange{InstanceID: id,
			CurrentState: xmlState{Code: stateCodes[i.State], Name: i.State}, PreviousState: xmlState{Code: stateCodes[prev], Name: prev}})
	}
	c.advanceLocked()
	return resp, nil
}

func (c *state) stoppingDelayLocked(i *Instance) time.Duration {
	if i.Hibernated && c.boot.Hibernating > 0 {
		return c.boot.Hibernating
	}
	return c.boot.Stopping
}

// pendingUntilLocked is when a pending instance runs: its launch's start delay, or a start's.
func (c *state) pendingUntilLocked(i *Instance) time.Time {
	if i.Starts > 0 {
		return i.StartedAt.Add(c.boot.Starting)
	}
	return i.LaunchTime.Add(c.startDelay)
}

// readyAtLocked is when the node on a running instance is Ready: its first boot bootstraps,
// later boots only resume.
func (c *state) readyAtLocked(i *Instance) time.Time {
	switch {
	case i.Starts == 0:
		return i.RunningAt.Add(c.boot.FirstBoot)
	case i.Hibernated && c.boot.ResumeHibernated > 0:
		return i.RunningAt.Add(c.boot.ResumeHibernated)
	}
	return i.RunningAt.Add(c.boot.Resume)
}

// advancePowerLocked moves a stopping instance on to stopped when its stop is due, giving its
// on-demand capacity back to the zone.
func (c *state) advancePowerLocked(i *Instance, now time.Time) {
	if i.State != StateStopping || now.Before(i.StoppingAt.Add(c.stoppingDelayLocked(i))) {
		return
	}
	i.State = StateStopped
	if _, limited := c.zoneCap[i.Zone]; limited && i.Reservation == "" && i.Lifecycle != "spot" {
		c.zoneCap[i.Zone]++
	}
}

// WaitReady waits, on the cloud's clock, until the node on instance id would be Ready (the
// instance runs and its boot is done: BootDelays), and fails when the instance is not on its
// way there (stopped, terminated) or ctx ends.
func (c *Cloud) WaitReady(ctx context.Context, id string) error {
	for {
		due, err := c.st.untilReady(id)
		if err != nil || due <= 0 {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.st.clock.After(due):
		}
	}
}

// untilReady is how long the node on instance id still needs to be Ready; 0 when it is.
func (c *state) untilReady(id string) (time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked()
	i := c.instances[id]
	if i == nil {
		return 0, fmt.Errorf("fakeaws: instance %s does not exist", id)
	}
	now := c.clock.Now()
	switch i.State {
	case StatePending:
		return max(c.pendingUntilLocked(i).Sub(now), time.Millisecond), nil
	case StateRunning:
		return max(c.readyAtLocked(i).Sub(now), 0), nil
	}
	return 0, fmt.Errorf("fakeaws: instance %s is %s: its node will not become Ready", id, i.State)
}

// checkHibernation refuses a launch with hibernation configured whose root volume (volumes[0])
// is not encrypted, as EC2 does.
func checkHibernation(configured bool, volumes []volumeSpec) *apiError {
	if configured && !volumes[0].encrypted {
		return badRequest("UnsupportedHibernationConfiguration", "For hibernation, the root device volume must be encrypted.")
	}
	return nil
}
