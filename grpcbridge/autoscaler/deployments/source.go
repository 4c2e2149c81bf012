// Package deployments serves MachineDeployments as Cluster Autoscaler node groups: the default
// mode of `machinist autoscaler`, next to machinist's controllers.
//
// A MachineDeployment is a group when it carries the min/max size annotations (see groups.go)
// or is named by --nodes. Lookups come from an in-memory index fed by informers; size changes
// are optimistic-concurrency patches of the MachineDeployment. Deleting specific nodes uses the
// MCM protocol: the machines are listed in the deployment's trigger-deletion-by-mcm annotation
// and replicas drop by as many in the same update; the MachineDeployment controller then makes
// its MachineSets delete exactly those machines.
package deployments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler"
)

// Config configures a Source.
type Config struct {
	// Control is the cluster that holds the Machine* objects. Required.
	Control *rest.Config
	// Namespace limits the provider to one namespace; "" watches all namespaces.
	Namespace string
	// Groups are the --nodes groups; they win over annotations for the same deployment.
	Groups []FlagGroup
	// GPULabel is the node label whose values name GPU types (GetAvailableGPUTypes).
	GPULabel string
	// Log is the provider's logger; nil means slog.Default().
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Marks tells which MachineClasses are marked out of capacity (capacity fallback); nil reads
	// the marks the controller publishes on the MachineClasses (annotation
	// machinist.io/capacity-exhausted), which is what a separate process has to go by.
	Marks fallback.Marks
}

// Source serves MachineDeployments as node groups. Create it with New and Start it before
// serving.
type Source struct {
	cfg    Config
	log    *slog.Logger
	now    func() time.Time
	ix     *index
	client client.Client
	cache  cache.Cache
	synced atomic.Bool
	events *eventRecorder

	flagWarnings flagWarnings
}

// New returns a Source for cfg. It contacts nothing until Start.
func New(cfg Config) (*Source, error) {
	if cfg.Control == nil {
		return nil, fmt.Errorf("autoscaler: no control cluster configured: pass --control-kubeconfig or run in-cluster")
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("autoscaler: scheme: %w", err)
	}
	c, err := client.New(cfg.Control, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("autoscaler: client for the control cluster: %w", err)
	}
	// The index reads no managed fields: they are dropped as objects arrive, the largest part of
	// a cached Machine* object (docs/performance.md, "Cluster Autoscaler server at 500 node groups").
	opts := cache.Options{Scheme: scheme, DefaultTransform: cache.TransformStripManagedFields()}
	if cfg.Namespace != "" {
		opts.DefaultNamespaces = map[string]cache.Config{cfg.Namespace: {}}
	}
	ca, err := cache.New(cfg.Control, opts)
	if err != nil {
		return nil, fmt.Errorf("autoscaler: informer cache: %w", err)
	}
	ev, err := newEventRecorder(cfg.Control, scheme)
	if err != nil {
		return nil, err
	}
	ix := newIndex(log, now, cfg.Groups)
	ix.warn = ev.warn
	return &Source{
		cfg: cfg, log: log, now: now, client: c, cache: ca, events: ev, ix: ix,
	}, nil
}

// Start starts the informers and returns once the index holds every Machine, MachineSet,
// MachineDeployment and MachineClass, so that the first answer Cluster Autoscaler gets is already complete.
// The informers run until ctx is done.
func (p *Source) Start(ctx context.Context) error {
	if err := p.events.start(ctx); err != nil {
		return err
	}
	var regs []toolscache.ResourceEventHandlerRegistration
	add := func(obj client.Object, put, del func(any)) error {
		inf, err := p.cache.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("autoscaler: watch %T: %w: install the machine.sapcloud.io CRDs (kubernetes/crds) in the control cluster, or point --control-kubeconfig at the cluster that has them", obj, err)
		}
		reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    put,
			UpdateFunc: func(_, o any) { put(o) },
			DeleteFunc: func(o any) {
				if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
					o = t.Obj
				}
				del(o)
			},
		})
		if err != nil {
			return fmt.Errorf("autoscaler: event handler for %T: %w", obj, err)
		}
		regs = append(regs, reg)
		return nil
	}
	if err := add(&v1alpha1.Machine{},
		func(o any) { as(o, p.ix.putMachine) }, func(o any) { as(o, p.ix.deleteMachine) }); err != nil {
		return err
	}
	if err := add(&v1alpha1.MachineSet{},
		func(o any) { as(o, p.ix.putSet) }, func(o any) { as(o, p.ix.deleteSet) }); err != nil {
		return err
	}
	if err := add(&v1alpha1.MachineDeployment{},
		func(o any) { as(o, p.ix.putDeployment) }, func(o any) { as(o, p.ix.deleteDeployment) }); err != nil {
		return err
	}
	if err := add(&v1alpha1.MachineClass{},
		func(o any) { as(o, p.ix.putClass) }, func(o any) { as(o, p.ix.deleteClass) }); err != nil {
		return err
	}
	go func() {
		if err := p.cache.Start(ctx); err != nil {
			p.log.Error("autoscaler: informers stopped", "error", err)
		}
	}()
	p.log.Info("autoscaler: waiting for the Machine* informers to sync", "namespace", p.namespaceText())
	waiting := make(chan struct{})
	defer close(waiting)
	go func() {
		start := time.Now()
		t := time.NewTicker(15 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-waiting:
				return
			case <-t.C:
				p.log.Warn("autoscaler: still waiting for the Machine* informers; is the control cluster reachable, are the machine.sapcloud.io CRDs installed and may this identity list them?",
					"namespace", p.namespaceText(), "waited", time.Since(start).Round(time.Second))
			}
		}
	}()
	if !p.cache.WaitForCacheSync(ctx) {
		return fmt.Errorf("autoscaler: informers did not sync before shutdown: check that the control cluster is reachable and the machine.sapcloud.io CRDs are installed")
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), syncedFuncs(regs)...) {
		return fmt.Errorf("autoscaler: event handlers did not sync before shutdown")
	}
	p.synced.Store(true)
	p.flagWarnings.report(p.log, p.namespaceText(), p.ix.missingDeployments(p.cfg.flagDeployments()))
	p.log.Info("autoscaler: node groups loaded", "groups", len(p.NodeGroups()))
	return nil
}

func syncedFuncs(regs []toolscache.ResourceEventHandlerRegistration) []toolscache.InformerSynced {
	out := make([]toolscache.InformerSynced, 0, len(regs))
	for _, r := range regs {
		out = append(out, r.HasSynced)
	}
	return out
}

func as[T any](o any, f func(T)) {
	if t, ok := o.(T); ok {
		f(t)
	}
}

func (p *Source) namespaceText() string {
	if p.cfg.Namespace == "" {
		return "(all)"
	}
	return p.cfg.Namespace
}

// Ready reports whether the index is loaded.
func (p *Source) Ready() bool { return p.synced.Load() }

// NodeGroups lists every group, sorted by id. The list is built once per change of the groups
// and shared: callers must not modify it.
func (p *Source) NodeGroups() []autoscaler.NodeGroup {
	p.ix.mu.RLock()
	list := p.ix.sorted
	p.ix.mu.RUnlock()
	if list != nil {
		return list
	}
	p.ix.mu.Lock()
	defer p.ix.mu.Unlock()
	if p.ix.sorted == nil {
		out := make([]autoscaler.NodeGroup, 0, len(p.ix.groups))
		for _, g := range p.ix.groups {
			out = append(out, p.nodeGroupLocked(g))
		}
		autoscaler.SortGroups(out)
		p.ix.sorted = out
	}
	return p.ix.sorted
}

func (p *Source) nodeGroupLocked(g *group) autoscaler.NodeGroup { return g.ng }

// NodeGroupForNode resolves a node, or one of our placeholders, to its group from memory.
func (p *Source) NodeGroupForNode(n autoscaler.Node) (autoscaler.NodeGroup, bool, error) {
	p.ix.mu.RLock()
	defer p.ix.mu.RUnlock()
	if m := p.ix.machineForNodeLocked(n); m != nil {
		if g := p.ix.groupOfMachineLocked(m); g != nil {
			return p.nodeGroupLocked(g), true, nil
		}
		return autoscaler.NodeGroup{}, false, nil
	}
	if t, ok := p.ix.tombstones[driver.ProviderIDKey(n.ID())]; ok {
		if g := p.ix.groups[t.group]; g != nil {
			return p.nodeGroupLocked(g), true, nil
		}
	}
	return autoscaler.NodeGroup{}, false, nil
}

func (p *Source) groupRLocked(id string) (*group, error) {
	g := p.ix.groups[id]
	if g == nil {
		return nil, driver.Errorf(driver.NotFound,
			"node group %q not found: annotate MachineDeployment %s with %s and %s, or name it in --nodes", id, id, AnnotationMinSize, AnnotationMaxSize)
	}
	return g, nil
}

func (p *Source) group(id string) (*group, error) {
	p.ix.mu.RLock()
	defer p.ix.mu.RUnlock()
	return p.groupRLocked(id)
}

// TargetSize is the MachineDeployment's spec.replicas.
func (p *Source) TargetSize(_ context.Context, id string) (int, error) {
	p.ix.mu.RLock()
	defer p.ix.mu.RUnlock()
	g, err := p.groupRLocked(id)
	if err != nil {
		return 0, err
	}
	md := p.ix.mds[g.md]
	if md == nil {
		return 0, driver.Errorf(driver.NotFound, "node group %q: MachineDeployment %s not found", id, g.md)
	}
	return int(md.Spec.Replicas), nil
}

// IncreaseSize raises spec.replicas by delta, refusing to pass the maximum.
func (p *Source) IncreaseSize(ctx context.Context, id string, delta int) error {
	g, err := p.group(id)
	if err != nil {
		return err
	}
	return p.update(ctx, g, func(md *v1alpha1.MachineDeployment, b Bounds, mp *mdPatch) error {
		want := int(md.Spec.Replicas) + delta
		if want > b.Max {
			return driver.Errorf(driver.FailedPrecondition,
				"node group %q: increasing %d by %d to %d would exceed the maximum size %d", id, md.Spec.Replicas, delta, want, b.Max)
		}
		mp.Spec.Replicas = int32(want)
		return nil
	})
}

// DeleteNodes marks the machines of the named nodes in the MachineDeployment's
// trigger-deletion-by-mcm annotation and lowers spec.replicas by the number newly marked, in one
// update, so that the MachineSets delete exactly those machines.
func (p *Source) DeleteNodes(ctx context.Context, id string, nodes []autoscaler.Node) error {
	g, err := p.group(id)
	if err != nil {
		return err
	}
	names, err := p.machinesToDelete(g, nodes)
	if err != nil || len(names) == 0 {
		return err
	}
	return p.update(ctx, g, func(md *v1alpha1.MachineDeployment, b Bounds, mp *mdPatch) error {
		now := p.now().UTC().Format(time.RFC3339)
		entries := parseTriggerDeletion(md.Annotations[v1alpha1.AnnotationTriggerDeletionByMCM])
		entries = p.pruneGone(md, entries)
		var fresh []string
		for _, name := range names {
			if _, marked := entries[name]; !marked {
				fresh = append(fresh, name)
				entries[name] = now
			}
		}
		if len(fresh) == 0 {
			return errNothingToDo
		}
		want := int(md.Spec.Replicas) - len(fresh)
		if want < b.Min {
			return driver.Errorf(driver.FailedPrecondition,
				"node group %q: deleting %d node(s) (%s) would bring the size from %d below the minimum %d",
				id, len(fresh), strings.Join(fresh, ", "), md.Spec.Replicas, b.Min)
		}
		mp.Spec.Replicas = int32(want)
		mp.Metadata.Annotations = map[string]*string{
			v1alpha1.AnnotationTriggerDeletionByMCM:      ptr.To(formatTriggerDeletion(entries)),
			v1alpha1.AnnotationLastReplicaChangeByScaler: ptr.To(now),
		}
		p.log.Info("autoscaler: marking machines for deletion", "group", id, "machines", fresh, "replicas", want)
		return nil
	})
}

// machinesToDelete resolves the nodes to machine names, refusing nodes outside the group before
// anything changes, and skipping machines already terminating.
func (p *Source) machinesToDelete(g *group, nodes []autoscaler.Node) ([]string, error) {
	p.ix.mu.RLock()
	defer p.ix.mu.RUnlock()
	var names []string
	for _, n := range nodes {
		m := p.ix.machineForNodeLocked(n)
		if m == nil {
			if t, ok := p.ix.tombstones[driver.ProviderIDKey(n.ID())]; ok && t.group == g.id {
				continue // already deleted
			}
			return nil, driver.Errorf(driver.NotFound,
				"node group %q: node %q (providerID %q) is not a machine of any node group; nothing was deleted", g.id, n.Name, n.ProviderID)
		}
		owner := p.ix.groupOfMachineLocked(m)
		if owner == nil || owner.id != g.id {
			other := "no node group"
			if owner != nil {
				other = "node group " + owner.id
			}
			return nil, driver.Errorf(driver.InvalidArgument,
				"node group %q: node %q (machine %s/%s) belongs to %s; nothing was deleted", g.id, n.Name, m.Namespace, m.Name, other)
		}
		if m.DeletionTimestamp != nil || m.Status.CurrentStatus.Phase == v1alpha1.MachineTerminating {
			continue
		}
		if why := preservedBecause(m, n, p.now()); why != "" {
			return nil, driver.Errorf(driver.FailedPrecondition,
				"node group %q: node %q (machine %s/%s) is preserved %s; nothing was deleted: remove annotation %s from the node (or the machine) to release it",
				g.id, n.Name, m.Namespace, m.Name, why, v1alpha1.AnnotationPreserve)
		}
		if m.Namespace != g.md.Namespace {
			return nil, driver.Errorf(driver.Internal, "node group %q: machine %s/%s is in another namespace", g.id, m.Namespace, m.Name)
		}
		names = append(names, m.Name)
	}
	return names, nil
}

// preservedBecause says why a machine must not be scaled down, or "": it is preserved (its
// preserveExpiryTime is still to come) or about to be (preserve=now on its node or, without one on
// the node, on the machine). Its node then carries Cluster Autoscaler's scale-down-disabled
// annotation, so Cluster Autoscaler does not choose it; a request for it anyway (Cluster Autoscaler
// decided before the annotation arrived) is refused rather than letting the MachineSets delete
// another machine or this one against the operator's wish.
func preservedBecause(m *v1alpha1.Machine, n autoscaler.Node, now time.Time) string {
	if exp := m.Status.CurrentStatus.PreserveExpiryTime; exp != nil && exp.After(now) {
		return "until " + exp.UTC().Format(time.RFC3339)
	}
	value, onNode := n.Annotations[v1alpha1.AnnotationPreserve]
	if !onNode {
		value = m.Annotations[v1alpha1.AnnotationPreserve]
	}
	if value == v1alpha1.PreserveNow {
		return "(" + v1alpha1.AnnotationPreserve + "=" + value + ")"
	}
	return ""
}

// pruneGone drops entries of machines that no longer exist and were marked long enough ago that
// the informer has certainly seen them, so the annotation cannot grow without bound.
func (p *Source) pruneGone(md *v1alpha1.MachineDeployment, entries map[string]string) map[string]string {
	p.ix.mu.RLock()
	defer p.ix.mu.RUnlock()
	for name, ts := range entries {
		if p.ix.machines[key{Namespace: md.Namespace, Name: name}] != nil {
			continue
		}
		if t, err := time.Parse(time.RFC3339, ts); err == nil && p.now().Sub(t) > tombstoneTTL {
			delete(entries, name)
		}
	}
	return entries
}

// DecreaseTargetSize lowers spec.replicas without touching registered nodes: the MachineSets
// then delete machines whose node never registered first. It refuses to go below the number of
// registered machines and stops at the minimum size, as MCM does.
func (p *Source) DecreaseTargetSize(ctx context.Context, id string, delta int) error {
	g, err := p.group(id)
	if err != nil {
		return err
	}
	return p.update(ctx, g, func(md *v1alpha1.MachineDeployment, b Bounds, mp *mdPatch) error {
		marked := parseTriggerDeletion(md.Annotations[v1alpha1.AnnotationTriggerDeletionByMCM])
		registered := p.registered(g, marked)
		want := int(md.Spec.Replicas) + delta
		if want < registered {
			return driver.Errorf(driver.FailedPrecondition,
				"node group %q: decreasing the target %d by %d would drop registered nodes (%d registered); only unfulfilled requests can be dropped, delete nodes with NodeGroupDeleteNodes",
				id, md.Spec.Replicas, -delta, registered)
		}
		if want < b.Min {
			p.log.Info("autoscaler: target decrease stops at the minimum size", "group", id, "requested", want, "min", b.Min)
			want = b.Min
		}
		if want >= int(md.Spec.Replicas) {
			return errNothingToDo
		}
		mp.Spec.Replicas = int32(want)
		return nil
	})
}

// registered counts the group's machines whose node has joined and that are not on their way
// out.
func (p *Source) registered(g *group, marked map[string]string) int {
	p.ix.mu.RLock()
	defer p.ix.mu.RUnlock()
	n := 0
	p.ix.eachMachineLocked(g, func(m *v1alpha1.Machine) {
		if _, ok := marked[m.Name]; !ok && m.DeletionTimestamp == nil && isRegistered(m) {
			n++
		}
	})
	return n
}

func isRegistered(m *v1alpha1.Machine) bool {
	switch m.Status.CurrentStatus.Phase {
	case v1alpha1.MachineRunning, v1alpha1.MachineAvailable, v1alpha1.MachineUnknown,
		v1alpha1.MachineInPlaceUpdating, v1alpha1.MachineInPlaceUpdateSuccessful, v1alpha1.MachineInPlaceUpdateFailed:
		return true
	case v1alpha1.MachineTerminating:
		return false
	}
	// The controller copies the node's conditions to the machine: a Pending machine with
	// conditions has a node that joined but is not ready yet.
	return len(m.Status.Conditions) > 0
}

// Nodes lists every machine of the group as an instance, in no particular order.
func (p *Source) Nodes(_ context.Context, id string) ([]autoscaler.Instance, error) {
	p.ix.mu.RLock()
	defer p.ix.mu.RUnlock()
	g, err := p.groupRLocked(id)
	if err != nil {
		return nil, err
	}
	// Unsorted: Cluster Autoscaler matches instances by id, and sorting 1000 ids with long common prefixes
	// would cost a third of the call.
	out := make([]autoscaler.Instance, 0, p.ix.countMachinesLocked(g))
	exhausted := p.exhaustedLocked(g)
	p.ix.eachMachineLocked(g, func(m *v1alpha1.Machine) {
		in := Instance(m)
		if _, marked := g.marked[m.Name]; marked && in.State != autoscaler.StateDeleting {
			in.State, in.Error = autoscaler.StateDeleting, nil
		}
		if exhausted != nil && in.State == autoscaler.StateCreating && in.Error == nil {
			// Every class of the group is out of capacity: the machine waits, and Cluster
			// Autoscaler should back off the group in this loop rather than after its provisioning
			// timeout.
			in.Error = exhausted
		}
		out = append(out, in)
	})
	return out, nil
}

// marks are the exhausted marks the provider goes by.
func (p *Source) marks() fallback.Marks {
	if p.cfg.Marks != nil {
		return p.cfg.Marks
	}
	return publishedMarks{p}
}

// publishedMarks reads the marks published on the classes of the index. Callers hold ix.mu.
type publishedMarks struct{ p *Source }

func (m publishedMarks) Exhausted(namespace, class string) (fallback.Mark, bool) {
	return fallback.PublishedMark(m.p.ix.classes[key{Namespace: namespace, Name: class}], m.p.now())
}

// chainLocked is the fallback chain of a group's deployment (classes in the index only), or ok
// false for a deployment without fallback classes.
func (p *Source) chainLocked(g *group) (fallback.Chain, bool) {
	if g.chain == nil {
		return fallback.Chain{}, false
	}
	chain := *g.chain
	known := make([]string, 1, len(chain.Classes))
	known[0] = chain.Classes[0]
	for _, n := range chain.Classes[1:] {
		if p.ix.classes[key{Namespace: chain.Namespace, Name: n}] != nil {
			known = append(known, n)
		}
	}
	chain.Classes = known
	return chain, true
}

// exhaustedLocked returns the error of a group with fallback classes that are all marked out of
// capacity, nil otherwise.
func (p *Source) exhaustedLocked(g *group) *autoscaler.InstanceError {
	md := p.ix.mds[g.md]
	if md == nil {
		return nil
	}
	chain, ok := p.chainLocked(g)
	if !ok {
		return nil
	}
	_, skipped, found := fallback.Pick(chain, indexPrices{Marks: p.marks(), ix: p.ix}, nil)
	if found {
		return nil
	}
	return &autoscaler.InstanceError{
		Code:    driver.ResourceExhausted.String(),
		Message: "every class of MachineDeployment " + md.Namespace + "/" + md.Name + " is out of capacity: " + fallback.Describe(chain.Classes, skipped),
		Class:   autoscaler.ErrorClassOutOfResources,
	}
}

// Instance describes a machine as Cluster Autoscaler sees it: its providerID once known, else a placeholder;
// Creating until its node can run pods, with the create error when the create failed; Deleting
// once it is being deleted or failed for another reason (its MachineSet replaces it).
func Instance(m *v1alpha1.Machine) autoscaler.Instance {
	in := autoscaler.Instance{ID: autoscaler.InstanceID(m.Spec.ProviderID)}
	if in.ID == "" {
		in.ID = autoscaler.Placeholder(m.Namespace, m.Name)
	}
	op := m.Status.LastOperation
	phase := m.Status.CurrentStatus.Phase
	switch {
	case m.DeletionTimestamp != nil || phase == v1alpha1.MachineTerminating:
		in.State = autoscaler.StateDeleting
	case op.Type == v1alpha1.MachineOperationCreate && op.State == v1alpha1.MachineStateFailed:
		in.State = autoscaler.StateCreating
		in.Error = createError(op)
	case phase == v1alpha1.MachineFailed:
		in.State = autoscaler.StateDeleting
	case phase == "" || phase == v1alpha1.MachinePending || phase == v1alpha1.MachineCrashLoopBackOff:
		in.State = autoscaler.StateCreating
	default:
		in.State = autoscaler.StateRunning
	}
	return in
}

func createError(op v1alpha1.LastOperation) *autoscaler.InstanceError {
	code, ok := driver.ParseCode(op.ErrorCode)
	if !ok {
		code = driver.Unknown
	}
	class := autoscaler.ErrorClassOther
	if code == driver.ResourceExhausted {
		class = autoscaler.ErrorClassOutOfResources
	}
	return &autoscaler.InstanceError{Code: code.String(), Message: op.Description, Class: class}
}

// TemplateNode builds the group's node from its MachineClass's nodeTemplate and the
// deployment's node template labels and taints.
func (p *Source) TemplateNode(_ context.Context, id string) (*corev1.Node, error) {
	p.ix.mu.RLock()
	defer p.ix.mu.RUnlock()
	g, err := p.groupRLocked(id)
	if err != nil {
		return nil, err
	}
	md := p.ix.mds[g.md]
	if md == nil {
		return nil, driver.Errorf(driver.NotFound, "node group %q: MachineDeployment %s not found", id, g.md)
	}
	ref := md.Spec.Template.Spec.Class
	if ref.Kind != "" && ref.Kind != "MachineClass" {
		return nil, fmt.Errorf("node group %q: class kind %q: %w", id, ref.Kind, autoscaler.ErrNoTemplate)
	}
	name := p.newNodeClassLocked(g, md)
	class := p.ix.classes[key{Namespace: md.Namespace, Name: name}]
	if class == nil {
		return nil, driver.Errorf(driver.FailedPrecondition,
			"node group %q: MachineClass %s/%s of the MachineDeployment not found: create it or fix spec.template.spec.class.name", id, md.Namespace, name)
	}
	tmpl := md.Spec.Template.Spec.NodeTemplateSpec
	return autoscaler.BuildTemplateNode(autoscaler.TemplateSpec{
		GroupID: id, ClassName: class.Name, NodeTemplate: class.NodeTemplate,
		Labels: tmpl.Labels, Annotations: tmpl.Annotations, Taints: tmpl.Spec.Taints,
	})
}

// Options are the deployment's option annotations.
func (p *Source) Options(_ context.Context, id string) (autoscaler.Options, error) {
	g, err := p.group(id)
	if err != nil {
		return autoscaler.Options{}, err
	}
	return g.options, nil
}

// GPUTypes are the distinct values of the GPU label in the groups' node templates.
func (p *Source) GPUTypes() []string {
	if p.cfg.GPULabel == "" {
		return nil
	}
	p.ix.mu.RLock()
	defer p.ix.mu.RUnlock()
	seen := map[string]bool{}
	for _, g := range p.ix.groups {
		if md := p.ix.mds[g.md]; md != nil {
			if v := md.Spec.Template.Spec.NodeTemplateSpec.Labels[p.cfg.GPULabel]; v != "" {
				seen[v] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// Refresh is cheap: the informers keep the index current and ride out API-server outages on
// their own (Cluster Autoscaler then sees the last known state, never an error).
func (p *Source) Refresh(context.Context) error {
	p.ix.sweepTombstones()
	p.flagWarnings.report(p.log, p.namespaceText(), p.ix.missingDeployments(p.cfg.flagDeployments()))
	return nil
}

// missingDeployments returns the deployments among want that the index does not hold.
func (ix *index) missingDeployments(want []key) []key {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var missing []key
	for _, k := range want {
		if ix.mds[k] == nil {
			missing = append(missing, k)
		}
	}
	return missing
}

// flagWarnings remembers which --nodes deployments were reported missing, so each is reported
// once while it is missing (and again if it goes missing after it existed).
type flagWarnings struct {
	mu     sync.Mutex
	warned map[key]bool
}

func (w *flagWarnings) report(log *slog.Logger, namespace string, missing []key) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.warned == nil {
		w.warned = map[key]bool{}
	}
	gone := map[key]bool{}
	for _, k := range missing {
		gone[k] = true
		if !w.warned[k] {
			log.Warn("autoscaler: --nodes names a MachineDeployment that does not exist; the group is not served until it does",
				"machineDeployment", k.String(), "namespace", namespace)
			w.warned[k] = true
		}
	}
	for k := range w.warned {
		if !gone[k] {
			delete(w.warned, k)
		}
	}
}

// ---- updates

// mdPatch is a JSON merge patch of a MachineDeployment, locked to the resourceVersion it was
// computed from (optimistic concurrency: a concurrent writer makes it fail with Conflict).
type mdPatch struct {
	Metadata struct {
		ResourceVersion string             `json:"resourceVersion"`
		Annotations     map[string]*string `json:"annotations,omitempty"`
	} `json:"metadata"`
	Spec struct {
		Replicas int32 `json:"replicas"`
	} `json:"spec"`
}

var errNothingToDo = fmt.Errorf("nothing to do")

// conflictBackoff spreads retries of a conflicting update over 2 to 4 s, inside Cluster Autoscaler's default
// 5 s deadline: the controllers write the deployment's status often, and Cluster Autoscaler may scale a group
// while the previous change is still being written.
var conflictBackoff = wait.Backoff{Steps: 12, Duration: 5 * time.Millisecond, Factor: 1.6, Jitter: 1.0, Cap: 500 * time.Millisecond}

// update reads the group's MachineDeployment from the API server, lets change fill a patch, and
// applies it with optimistic concurrency, retrying on conflict. The bounds are re-read from the
// fresh object so a concurrent change of the annotations is honoured.
func (p *Source) update(ctx context.Context, g *group, change func(*v1alpha1.MachineDeployment, Bounds, *mdPatch) error) error {
	err := retry.RetryOnConflict(conflictBackoff, func() error {
		md := &v1alpha1.MachineDeployment{}
		if err := p.client.Get(ctx, g.md, md); err != nil {
			return err
		}
		var b Bounds
		p.ix.mu.RLock()
		if fg, ok := p.ix.flags[g.md]; ok {
			b = fg
		} else if ab, _, ok, _ := BoundsFromAnnotations(md.Annotations); ok {
			b = ab
		} else {
			p.ix.mu.RUnlock()
			return driver.Errorf(driver.NotFound, "node group %q: MachineDeployment %s is no longer a node group", g.id, g.md)
		}
		p.ix.mu.RUnlock()
		var mp mdPatch
		mp.Metadata.ResourceVersion = md.ResourceVersion
		mp.Spec.Replicas = md.Spec.Replicas
		if err := change(md, b, &mp); err != nil {
			return err
		}
		data, err := json.Marshal(mp)
		if err != nil {
			return err
		}
		if err := p.client.Patch(ctx, md, client.RawPatch(types.MergePatchType, data)); err != nil {
			return err
		}
		p.ix.putDeployment(md)
		return nil
	})
	if err == nil || errors.Is(err, errNothingToDo) {
		return nil
	}
	var st *driver.Status
	if errors.As(err, &st) {
		return err // a refusal of ours
	}
	return apiError(err, fmt.Sprintf("node group %q: update MachineDeployment %s", g.id, g.md))
}

// apiError gives an API error the machine code that tells Cluster Autoscaler's operator what happened.
func apiError(err error, what string) error {
	code := driver.Unavailable
	switch {
	case apierrors.IsNotFound(err):
		code = driver.NotFound
	case apierrors.IsConflict(err):
		code = driver.Aborted
	case apierrors.IsForbidden(err):
		code = driver.PermissionDenied
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		code = driver.InvalidArgument
	case ctxErr(err) != driver.OK:
		code = ctxErr(err)
	}
	return driver.Wrap(code, err, "autoscaler: "+what)
}

func ctxErr(err error) driver.Code {
	switch c := driver.CodeOf(err); c {
	case driver.Canceled, driver.DeadlineExceeded:
		return c
	}
	return driver.OK
}

var _ autoscaler.NodeGroupSource = (*Source)(nil)

// flagDeployments are the deployments the --nodes groups name.
func (c Config) flagDeployments() []key {
	keys := make([]key, 0, len(c.Groups))
	for _, f := range c.Groups {
		keys = append(keys, f.MachineDeployment)
	}
	return keys
}
