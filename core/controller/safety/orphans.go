package safety

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/internal/classsecret"
	"github.com/machinist-io/machinist/core/controller/internal/drivercall"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
)

// orphanCollector deletes VMs no Machine owns once their grace period is over (MCM's orphan
// collection, docs/compatibility/mcm-controllers.md#orphan-vms-and-unmanaged-nodes).
type orphanCollector struct {
	*deps
	// probe says whether the Machine controller is frozen and the control plane reachable:
	// nothing is collected otherwise.
	probe *apiServerProbe

	trigger    chan struct{}
	mu         sync.Mutex
	candidates map[string]*candidate // providerID → first sighting
}

// candidate is a VM no Machine owns, remembered from the pass that first saw it.
type candidate struct {
	providerID  string
	machineName string
	className   string
	namespace   string
	firstSeen   time.Time
	reported    bool // dry run or duplicate: reported once
	// duplicate: a Machine of that name exists and runs another VM. Duplicates are reported,
	// never deleted: DeleteMachine with a name a live machine shares may take that machine's VM
	// too (drivers clean up by name), and the safety controller must never do that.
	duplicate bool
}

// classDriver is what a pass needs to call a class's driver.
type classDriver struct {
	class  *v1alpha1.MachineClass
	secret *corev1.Secret
	drv    driver.Driver
}

// run runs orphan passes every OrphanPeriod, and sooner when a machine is deleted or
// reports OutOfRange (several VMs for one machine), or when a candidate's grace period ends.
func (c *orphanCollector) run(ctx context.Context) error {
	if !c.mgr.GetCache().WaitForCacheSync(ctx) {
		return nil
	}
	for {
		wait := c.orphanPass(ctx)
		passed := c.now()
		t := c.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		case <-c.trigger:
			t.Stop()
			// Space triggered passes; a burst of deletions makes one pass.
			if d := c.opts.OrphanMinInterval - c.now().Sub(passed); d > 0 && !c.sleep(ctx, min(d, wait)) {
				return nil
			}
		}
	}
}

// poke asks for an orphan pass soon.
func (c *orphanCollector) poke() {
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

// orphanPass lists every class's VMs and deletes (at most OrphanMaxDeletesPerPass of) those no
// Machine has owned for OrphanGracePeriod, in four steps: it makes sure it may collect at all,
// finds the VMs without a machine, keeps track of when each was first seen, and deletes those
// whose grace period is over. It returns the wait until the next pass.
func (c *orphanCollector) orphanPass(ctx context.Context) time.Duration {
	wait := c.opts.OrphanPeriod
	retrySoon := min(wait, c.opts.APIServerStatusCheckTimeout)
	if !c.mayCollectOrphans(ctx) {
		return retrySoon
	}
	found, drivers, err := c.findOrphans(ctx)
	if err != nil {
		c.log.Warn("safety: orphan collection stopped", "err", err)
		return retrySoon
	}
	orphansFound.Set(float64(len(found)))
	now := c.now()
	due, nextDue := c.trackCandidates(found, now)
	if !nextDue.IsZero() {
		wait = min(wait, max(nextDue.Sub(now), time.Second))
	}
	switch c.deleteDue(ctx, due, drivers) {
	case passCapped:
		wait = min(wait, c.opts.OrphanMinInterval)
	case passInterrupted:
		return retrySoon
	}
	return wait
}

// mayCollectOrphans: nothing is collected while the machine controller is frozen, the control
// plane is unreachable or the cache is not synced (each counted and logged as a skip).
func (c *orphanCollector) mayCollectOrphans(ctx context.Context) bool {
	if c.probe.Frozen() {
		orphanSkips.WithLabelValues("frozen").Inc()
		c.log.Info("safety: orphan collection skipped: the machine controller is frozen")
		return false
	}
	if err := c.probe.controlPlaneReachable(ctx); err != nil {
		orphanSkips.WithLabelValues("apiserver-unreachable").Inc()
		c.log.Warn("safety: orphan collection skipped: control plane unreachable", "err", err)
		return false
	}
	syncCtx, cancel := context.WithTimeout(ctx, c.opts.APIServerStatusCheckTimeout)
	synced := c.mgr.GetCache().WaitForCacheSync(syncCtx)
	cancel()
	if !synced {
		orphanSkips.WithLabelValues("cache-unsynced").Inc()
		c.log.Warn("safety: orphan collection skipped: caches not synced")
		return false
	}
	return true
}

// findOrphans lists the VMs of every class (a class whose driver cannot list them is skipped)
// and returns those no Machine in the cache accounts for, by providerID, with the drivers of
// their classes. A machine that cannot be read ends the pass: nothing may be deleted on a guess.
func (c *orphanCollector) findOrphans(ctx context.Context) (map[string]*candidate, map[string]*classDriver, error) {
	var classes v1alpha1.MachineClassList
	if err := c.client.List(ctx, &classes, client.InNamespace(c.opts.Namespace)); err != nil {
		return nil, nil, fmt.Errorf("list machine classes: %w", err)
	}
	found := map[string]*candidate{}
	drivers := map[string]*classDriver{}
	for i := range classes.Items {
		class := &classes.Items[i]
		cd, vms, err := c.listVMs(ctx, class)
		if err != nil {
			c.log.Warn("safety: orphan collection: list VMs", "class", class.Namespace+"/"+class.Name, "err", err)
			continue
		}
		if cd == nil {
			continue
		}
		drivers[class.Namespace+"/"+class.Name] = cd
		for pid, name := range vms {
			if _, dup := found[pid]; dup {
				continue
			}
			m := &v1alpha1.Machine{}
			err := c.client.Get(ctx, client.ObjectKey{Namespace: class.Namespace, Name: name}, m)
			if err == nil && owns(m, pid) {
				continue
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return nil, nil, fmt.Errorf("read machine %s: %w", name, err)
			}
			found[pid] = &candidate{providerID: pid, machineName: name, className: class.Name, namespace: class.Namespace, duplicate: err == nil}
		}
	}
	return found, drivers, nil
}

// trackCandidates remembers when each VM of found was first seen (and forgets candidates no
// longer found: their machine appeared, or the VM is gone). It returns the candidates whose
// grace period is over, oldest first, and when the next one's ends (zero: none waits).
func (c *orphanCollector) trackCandidates(found map[string]*candidate, now time.Time) (due []*candidate, nextDue time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for pid := range c.candidates {
		if _, still := found[pid]; !still {
			delete(c.candidates, pid)
		}
	}
	for pid, f := range found {
		cand, known := c.candidates[pid]
		if known {
			cand.duplicate = f.duplicate
		} else {
			f.firstSeen = now
			c.candidates[pid] = f
			cand = f
			c.log.Info("safety: VM without machine found", "providerID", pid, "machine", f.machineName, "class", f.className, "deleteAfter", c.opts.OrphanGracePeriod)
		}
		if at := cand.firstSeen.Add(c.opts.OrphanGracePeriod); !now.Before(at) {
			due = append(due, cand)
		} else if nextDue.IsZero() || at.Before(nextDue) {
			nextDue = at
		}
	}
	sort.Slice(due, func(i, j int) bool { return due[i].firstSeen.Before(due[j].firstSeen) })
	return due, nextDue
}

// passEnd is how the deletions of a pass ended.
type passEnd int

const (
	passDone        passEnd = iota // every due candidate was dealt with (or the controller froze)
	passCapped                     // OrphanMaxDeletesPerPass was reached; the rest waits
	passInterrupted                // a machine could not be confirmed gone: the API server is in doubt
)

// deleteDue deals with the due candidates, oldest first: each one's machine is re-read from the
// API server right before anything happens; a VM a machine accounts for after all is forgotten,
// a second VM of a live machine is reported on the machine, a dry run reports the orphan on its
// class, and every other is deleted — at most OrphanMaxDeletesPerPass of them.
func (c *orphanCollector) deleteDue(ctx context.Context, due []*candidate, drivers map[string]*classDriver) passEnd {
	deleted := 0
	for _, cand := range due {
		if deleted >= c.opts.OrphanMaxDeletesPerPass {
			c.log.Info("safety: orphan deletion cap reached, the rest waits for the next pass", "cap", c.opts.OrphanMaxDeletesPerPass, "left", len(due)-deleted)
			return passCapped
		}
		if c.probe.Frozen() {
			return passDone
		}
		owned, live, err := c.ownedLive(ctx, cand)
		if err != nil {
			orphanSkips.WithLabelValues("apiserver-unreachable").Inc()
			c.log.Warn("safety: orphan deletion stopped: cannot confirm the machine is gone", "machine", cand.machineName, "err", err)
			return passInterrupted
		}
		cd := drivers[cand.namespace+"/"+cand.className]
		switch {
		case owned:
			c.forget(cand)
		case live != nil:
			c.reportDuplicate(cand, live)
		case c.opts.OrphanDryRun:
			c.reportDryRun(cand, cd)
		default:
			if err := c.deleteOrphan(ctx, cd, cand); err != nil {
				c.log.Warn("safety: delete orphan VM", "providerID", cand.providerID, "machine", cand.machineName, "err", err)
				continue
			}
			deleted++
			orphansDeleted.Inc()
			c.forget(cand)
			c.log.Info("safety: deleted orphan VM", "providerID", cand.providerID, "machine", cand.machineName, "class", cand.className)
			c.recorder.Eventf(cd.class, nil, corev1.EventTypeNormal, "OrphanVMDeleted", "CollectOrphans",
				"Deleted VM %s (machine %s): no Machine owned it for %s", cand.providerID, cand.machineName, c.opts.OrphanGracePeriod)
		}
	}
	return passDone
}

// reportDuplicate reports, once, a second VM carrying the name of a live machine: on the
// machine, never deleted (deleting by that name could take the machine's VM too).
func (c *orphanCollector) reportDuplicate(cand *candidate, live *v1alpha1.Machine) {
	if cand.reported {
		return
	}
	cand.reported = true
	c.log.Warn("safety: machine has a second VM; not deleting it automatically", "machine", cand.machineName, "providerID", cand.providerID, "machineProviderID", live.Spec.ProviderID)
	c.recorder.Eventf(live, nil, corev1.EventTypeWarning, "DuplicateVM", "CollectOrphans",
		"VM %s also carries this machine's name but the machine runs %s: delete it in the cloud by its ID (deleting by name could take the machine's VM too)",
		cand.providerID, live.Spec.ProviderID)
}

// reportDryRun reports, once, an orphan that --orphan-dry-run keeps.
func (c *orphanCollector) reportDryRun(cand *candidate, cd *classDriver) {
	if cand.reported {
		return
	}
	cand.reported = true
	c.log.Warn("safety: orphan VM (dry run, not deleted)", "providerID", cand.providerID, "machine", cand.machineName, "class", cand.className)
	c.recorder.Eventf(cd.class, nil, corev1.EventTypeWarning, "OrphanVM", "CollectOrphans",
		"VM %s (machine %s) has no Machine; --orphan-dry-run is set, so it is not deleted", cand.providerID, cand.machineName)
}

func (c *orphanCollector) forget(cand *candidate) {
	c.mu.Lock()
	delete(c.candidates, cand.providerID)
	c.mu.Unlock()
}

// listVMs asks a class's driver for its VMs. A class whose driver cannot be resolved or does not
// implement ListMachines yields nothing.
func (c *orphanCollector) listVMs(ctx context.Context, class *v1alpha1.MachineClass) (*classDriver, map[string]string, error) {
	d, err := c.drivers.ForClass(class)
	if err != nil {
		c.log.Debug("safety: no driver for class, skipping its orphans", "class", class.Name, "err", err)
		return nil, nil, nil
	}
	drv := drivercall.Instrument(registry.Normalize(class.Provider), d)
	secret, err := classsecret.Get(ctx, c.client, class)
	if err != nil {
		return nil, nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, c.opts.OrphanPeriod)
	defer cancel()
	resp, err := drv.ListMachines(lctx, &driver.ListMachinesRequest{MachineClass: class, Secret: secret})
	if driver.IsCode(err, driver.Unimplemented) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return &classDriver{class: class, secret: secret, drv: drv}, resp.MachineList, nil
}

// owns reports whether machine m accounts for the VM pid: it records that VM, or it has no VM
// recorded yet (it may be creating it right now, or its deletion cleans up by name), or it is
// being created or deleted. A settled machine with another providerID does not: the VM is a
// duplicate (reported, not deleted).
func owns(m *v1alpha1.Machine, pid string) bool {
	if m.DeletionTimestamp != nil || m.Spec.ProviderID == "" || driver.SameProviderID(m.Spec.ProviderID, pid) {
		return true
	}
	switch m.Status.CurrentStatus.Phase {
	case "", v1alpha1.MachineCrashLoopBackOff:
		return true
	}
	return false
}

// ownedLive re-reads the candidate's machine from the API server (not the cache). It returns
// whether the machine accounts for the VM and, when a machine of that name exists, the machine.
func (c *orphanCollector) ownedLive(ctx context.Context, cand *candidate) (bool, *v1alpha1.Machine, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.APIServerStatusCheckTimeout)
	defer cancel()
	m := &v1alpha1.Machine{}
	err := c.apiReader.Get(ctx, client.ObjectKey{Namespace: cand.namespace, Name: cand.machineName}, m)
	if apierrors.IsNotFound(err) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, err
	}
	return owns(m, cand.providerID), m, nil
}

// deleteOrphan calls DeleteMachine for a stand-in Machine carrying the VM's name and
// providerID, so the driver deletes exactly that VM and its artefacts.
func (c *orphanCollector) deleteOrphan(ctx context.Context, cd *classDriver, cand *candidate) error {
	if cd == nil {
		return fmt.Errorf("no driver for class %s", cand.className)
	}
	m := &v1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: cand.machineName, Namespace: cand.namespace},
		Spec: v1alpha1.MachineSpec{
			Class:      v1alpha1.ClassSpec{APIGroup: v1alpha1.GroupName, Kind: "MachineClass", Name: cand.className},
			ProviderID: cand.providerID,
		},
	}
	dctx, cancel := context.WithTimeout(ctx, c.opts.OrphanPeriod)
	defer cancel()
	_, err := cd.drv.DeleteMachine(dctx, &driver.DeleteMachineRequest{Machine: m, MachineClass: cd.class, Secret: cd.secret})
	if err != nil && !driver.IsCode(err, driver.NotFound) {
		return err
	}
	return nil
}

// setupTriggers runs an orphan pass soon after a machine is deleted (its VM deletion may
// have left something) or newly reports OutOfRange (several VMs for one machine).
func (c *orphanCollector) setupTriggers(mgr manager.Manager) error {
	p := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okO := e.ObjectOld.(*v1alpha1.Machine)
			n, okN := e.ObjectNew.(*v1alpha1.Machine)
			return okO && okN && n.Status.LastOperation.ErrorCode == driver.OutOfRange.String() &&
				o.Status.LastOperation.ErrorCode != driver.OutOfRange.String()
		},
	}
	err := builder.ControllerManagedBy(mgr).
		Named("machine-safety-orphans").
		For(&v1alpha1.Machine{}, builder.WithPredicates(p)).
		Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
			c.poke()
			return reconcile.Result{}, nil
		}))
	if err != nil {
		return fmt.Errorf("safety: orphan triggers: %w", err)
	}
	return nil
}
