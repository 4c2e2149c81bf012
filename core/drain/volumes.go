package drain

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// evictWithVolumes evicts one pod that mounts persistent volumes and waits until its volumes
// have detached from the node, then (without failing) until they are attached elsewhere, so the
// next stateful pod is not evicted while storage is still moving.
func (d *Drainer) evictWithVolumes(ctx context.Context, nodeName string, p *corev1.Pod, shared map[string]bool, opts Options) error {
	log := d.log().With("pod", p.Namespace+"/"+p.Name, "node", nodeName)
	pvNames, volumeIDs := d.trackedVolumes(ctx, p, shared)

	if err := d.evict(ctx, p, opts); err != nil {
		return err
	}
	if err := d.waitGone(ctx, p, deletionWait(p, opts), opts); err != nil {
		return err
	}
	if len(volumeIDs) == 0 {
		return nil
	}

	detachTimeout := gracePeriod(p) + opts.PVDetachTimeout
	// The conditions return no errors: a wait ends when they hold or the time (or ctx) runs out.
	err := wait.PollUntilContextTimeout(ctx, opts.PollInterval, detachTimeout, true, func(ctx context.Context) (bool, error) {
		node, err := d.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() != nil {
				return false, nil
			}
			// A vanished node has no volumes attached.
			return isNotFound(err), nil
		}
		return !anyAttached(node, volumeIDs), nil
	})
	if err != nil {
		log.Warn("drain: volumes still attached after the detach timeout, going on", "volumes", volumeIDs, "timeout", detachTimeout)
		return nil
	}
	log.Debug("drain: volumes detached", "volumes", volumeIDs)

	err = wait.PollUntilContextTimeout(ctx, opts.PollInterval, opts.PVReattachTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := d.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		elsewhere := map[string]bool{}
		for _, va := range list.Items {
			if pv := va.Spec.Source.PersistentVolumeName; pv != nil && va.Spec.NodeName != nodeName && va.Status.Attached {
				elsewhere[*pv] = true
			}
		}
		for _, pv := range pvNames {
			if !elsewhere[pv] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		// Not an error: the replacement pod may not be scheduled yet.
		log.Debug("drain: volumes not reattached elsewhere within the reattach timeout", "pvs", pvNames)
	}
	return nil
}

// trackedVolumes returns the persistent volumes of p that are not shared with other pods of the
// node, and their provider volume IDs. Volumes that cannot be resolved are not tracked.
func (d *Drainer) trackedVolumes(ctx context.Context, p *corev1.Pod, shared map[string]bool) ([]string, []string) {
	if d.VolumeIDs == nil {
		return nil, nil
	}
	var (
		pvNames []string
		specs   []*corev1.PersistentVolumeSpec
	)
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim == nil || shared[p.Namespace+"/"+v.PersistentVolumeClaim.ClaimName] {
			continue
		}
		pvc, err := d.Client.CoreV1().PersistentVolumeClaims(p.Namespace).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
		if err != nil || pvc.Spec.VolumeName == "" {
			continue
		}
		pv, err := d.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			continue
		}
		pvNames = append(pvNames, pv.Name)
		specs = append(specs, &pv.Spec)
	}
	if len(specs) == 0 {
		return nil, nil
	}
	ids, err := d.VolumeIDs(ctx, specs)
	if err != nil {
		d.log().Warn("drain: cannot map volumes to provider IDs, not waiting for their detachment",
			"pod", p.Namespace+"/"+p.Name, "err", fmt.Sprint(err))
		return nil, nil
	}
	return pvNames, ids
}

// anyAttached reports whether the node still lists one of the volume IDs as attached. Attached
// volume names look like kubernetes.io/csi/<driver>^<volumeHandle>.
func anyAttached(node *corev1.Node, ids []string) bool {
	for _, av := range node.Status.VolumesAttached {
		for _, id := range ids {
			if id != "" && strings.Contains(string(av.Name), id) {
				return true
			}
		}
	}
	return false
}
