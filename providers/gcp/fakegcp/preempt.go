package fakegcp

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"

	compute "google.golang.org/api/compute/v1"
	"k8s.io/utils/ptr"
)

// OperationTypePreempted is the operationType of the system operation Compute Engine records
// when it preempts an instance (`gcloud compute operations list
// --filter="operationType=compute.instances.preempted"`).
const OperationTypePreempted = "compute.instances.preempted"

// Preempt preempts a Spot or preemptible instance, as Compute Engine does when it takes the
// capacity back: a system operation of type compute.instances.preempted starts and the
// instance is STOPPING; when the operation is done (after the fake's operation delay) the
// instance is TERMINATED (a preemptible VM, or a Spot VM whose instanceTerminationAction is
// STOP or unset) or deleted with its auto-delete disks (a Spot VM with DELETE). It returns the
// operation's name.
func (c *Cloud) Preempt(zone, name string) (string, error) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.settleLocked()
	key := zone + "/" + name
	in, ok := c.st.instances[key]
	if !ok {
		return "", fmt.Errorf("fakegcp: no instance %s in %s", name, zone)
	}
	s := in.Scheduling
	if s == nil || (!s.Preemptible && s.ProvisioningModel != "SPOT") {
		return "", fmt.Errorf("fakegcp: instance %s is neither Spot nor preemptible: Compute Engine does not preempt it", name)
	}
	if in.Status != "RUNNING" {
		return "", fmt.Errorf("fakegcp: instance %s is %s: only a running instance is preempted", name, in.Status)
	}
	deleteIt := s.ProvisioningModel == "SPOT" && s.InstanceTerminationAction == "DELETE"
	in.Status = "STOPPING"
	id := in.Id
	op := c.st.startOperationLocked(zone, OperationTypePreempted, fmt.Sprintf("zones/%s/instances/%s", zone, name), 0, func() *OperationError {
		cur, ok := c.st.instances[key]
		if !ok || cur.Id != id {
			return nil
		}
		if deleteIt {
			c.st.removeInstanceLocked(key, false)
			return nil
		}
		cur.Status = "TERMINATED"
		cur.LastStopTimestamp = c.st.timestamp()
		return nil
	})
	op.TargetId = id
	op.User = "system"
	op.StatusMessage = "Instance was preempted."
	return op.Name, nil
}

// completeInstanceLocked gives an instance what Compute Engine always answers with: its tags,
// metadata and labels with their fingerprints (an instance without tags answers
// "tags": {"fingerprint": …}; Gardener's provider reads tags.items of every listed instance)
// and its scheduling with the defaults.
func completeInstanceLocked(in *compute.Instance) {
	if in.Tags == nil {
		in.Tags = &compute.Tags{}
	}
	in.Tags.Fingerprint = fingerprint(in.Tags.Items)
	if in.Metadata == nil {
		in.Metadata = &compute.Metadata{}
	}
	in.Metadata.Kind = "compute#metadata"
	in.Metadata.Fingerprint = fingerprint(in.Metadata.Items)
	in.LabelFingerprint = fingerprint(in.Labels)
	if in.Scheduling == nil {
		in.Scheduling = &compute.Scheduling{AutomaticRestart: ptr.To(true), OnHostMaintenance: "MIGRATE"}
	}
	if in.Scheduling.ProvisioningModel == "" {
		in.Scheduling.ProvisioningModel = "STANDARD"
	}
}

// fingerprint is an 8-byte hash of a value in base64, as Compute Engine's fingerprints look.
func fingerprint(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return base64.StdEncoding.EncodeToString(sum[:8])
}
