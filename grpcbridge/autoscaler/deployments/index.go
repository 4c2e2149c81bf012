package deployments

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler"
)

type key = types.NamespacedName

func keyOf(o metav1.Object) key { return key{Namespace: o.GetNamespace(), Name: o.GetName()} }

// group is a MachineDeployment Cluster Autoscaler may scale.
type group struct {
	id      string
	md      key
	bounds  Bounds
	source  string
	options autoscaler.Options
	// problems are option annotations that were ignored.
	problems []string
	// ng is the group as Cluster Autoscaler sees it, debug text included; computed once per deployment change
	// because Cluster Autoscaler asks for it on every NodeGroupForNode.
	ng autoscaler.NodeGroup
	// marked are the machines listed in the deployment's trigger-deletion annotation: already
	// subtracted from replicas, so reported as Deleting before their MachineSet gets to them.
	marked map[string]string
	// chain is the deployment's capacity fallback chain as annotated (classes not checked for
	// existence), nil without fallback classes.
	chain *fallback.Chain
	// price is the deployment's own price (fallback.AnnotationPricePerHour), overriding its
	// classes'; priceErr says why an annotated price is not used.
	price    *autoscaler.Price
	priceErr error
}

// classInfo is what the index keeps of a MachineClass besides the object: its price and the
// size of its template node, read once per change.
type classInfo struct {
	// value is the raw price annotation ("" without), to report a bad one once per change.
	value    string
	price    float64
	priced   bool
	priceErr error
	// cpu (cores) and memory (bytes) of the class's nodeTemplate; 0 without.
	cpu, memory float64
}

// tombstone remembers the group of a deleted machine, so that Cluster Autoscaler, which keeps asking about a
// node until its Node object is gone, never reads a managed node as unmanaged (Cluster Autoscaler issue #9877).
type tombstone struct {
	group   string
	expires time.Time
}

// tombstoneTTL is how long a deleted machine's ids still resolve to its group.
const tombstoneTTL = 15 * time.Minute

// index is the in-memory view of the Machine* objects, fed by informers. Every lookup Cluster Autoscaler makes
// is a few map reads under a read lock: providerID -> machine -> MachineSet -> MachineDeployment
// -> group.
type index struct {
	log   *slog.Logger
	now   func() time.Time
	flags map[key]Bounds

	mu           sync.RWMutex
	machines     map[key]*v1alpha1.Machine
	byProviderID map[string]key // by driver.ProviderIDKey: a node's spelling of the ID finds the machine's
	byNodeName   map[string][]key
	byName       map[string][]key
	machinesOf   map[key]map[key]*v1alpha1.Machine // MachineSet -> its machines
	sets         map[key]*v1alpha1.MachineSet
	setsOf       map[key]map[key]struct{} // MachineDeployment -> its MachineSets
	mds          map[key]*v1alpha1.MachineDeployment
	classes      map[key]*v1alpha1.MachineClass
	classInfo    map[key]classInfo
	groups       map[string]*group
	tombstones   map[string]tombstone
	// sorted is every group sorted by id, as NodeGroups answers; nil after a change of a group
	// (NodeGroups builds it again).
	sorted []autoscaler.NodeGroup

	// warn reports an annotation of an object that cannot be used, once per change of it (a
	// Warning Event; nil: the log only).
	warn func(obj runtime.Object, reason, message string)
}

func newIndex(log *slog.Logger, now func() time.Time, flags []FlagGroup) *index {
	ix := &index{
		log: log, now: now, flags: map[key]Bounds{},
		machines: map[key]*v1alpha1.Machine{}, byProviderID: map[string]key{},
		byNodeName: map[string][]key{}, byName: map[string][]key{},
		machinesOf: map[key]map[key]*v1alpha1.Machine{}, sets: map[key]*v1alpha1.MachineSet{},
		setsOf: map[key]map[key]struct{}{}, mds: map[key]*v1alpha1.MachineDeployment{},
		classes: map[key]*v1alpha1.MachineClass{}, classInfo: map[key]classInfo{}, groups: map[string]*group{},
		tombstones: map[string]tombstone{},
	}
	for _, f := range flags {
		ix.flags[f.MachineDeployment] = f.Bounds
	}
	return ix
}

// newer reports whether resource version a is newer than b. Resource versions are etcd
// revisions; when one does not parse, the incoming object wins.
func newer(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	if errA != nil || errB != nil {
		return true
	}
	return x >= y
}

// ownerName returns the name of the owner of o of the given machine.sapcloud.io kind,
// preferring the controller reference.
func ownerName(o metav1.Object, kind string) (string, bool) {
	refs := o.GetOwnerReferences()
	var found string
	for _, ref := range refs {
		if ref.Kind != kind || !strings.HasPrefix(ref.APIVersion, v1alpha1.GroupName+"/") {
			continue
		}
		if ref.Controller != nil && *ref.Controller {
			return ref.Name, true
		}
		if found == "" {
			found = ref.Name
		}
	}
	return found, found != ""
}

func addTo[V any](m map[key]map[key]V, owner, k key, v V) {
	set := m[owner]
	if set == nil {
		set = map[key]V{}
		m[owner] = set
	}
	set[k] = v
}

func removeFrom[V any](m map[key]map[key]V, owner, k key) {
	if set := m[owner]; set != nil {
		delete(set, k)
		if len(set) == 0 {
			delete(m, owner)
		}
	}
}

func appendKey(m map[string][]key, s string, k key) {
	if s != "" && !slices.Contains(m[s], k) {
		m[s] = append(m[s], k)
	}
}

func removeKey(m map[string][]key, s string, k key) {
	if s == "" {
		return
	}
	keys := slices.DeleteFunc(m[s], func(x key) bool { return x == k })
	if len(keys) == 0 {
		delete(m, s)
	} else {
		m[s] = keys
	}
}

// ---- Machines

func (ix *index) putMachine(m *v1alpha1.Machine) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	k := keyOf(m)
	if old := ix.machines[k]; old != nil {
		if !newer(m.ResourceVersion, old.ResourceVersion) {
			return
		}
		ix.unlinkMachine(old)
	}
	ix.machines[k] = m
	if m.Spec.ProviderID != "" {
		pid := driver.ProviderIDKey(m.Spec.ProviderID)
		ix.byProviderID[pid] = k
		delete(ix.tombstones, pid)
	}
	delete(ix.tombstones, driver.ProviderIDKey(autoscaler.Placeholder(m.Namespace, m.Name)))
	appendKey(ix.byNodeName, m.Labels[v1alpha1.LabelNode], k)
	appendKey(ix.byName, m.Name, k)
	if set, ok := ownerName(m, "MachineSet"); ok {
		addTo(ix.machinesOf, key{Namespace: m.Namespace, Name: set}, k, m)
	}
}

func (ix *index) unlinkMachine(m *v1alpha1.Machine) {
	k := keyOf(m)
	if pid := driver.ProviderIDKey(m.Spec.ProviderID); m.Spec.ProviderID != "" && ix.byProviderID[pid] == k {
		delete(ix.byProviderID, pid)
	}
	removeKey(ix.byNodeName, m.Labels[v1alpha1.LabelNode], k)
	removeKey(ix.byName, m.Name, k)
	if set, ok := ownerName(m, "MachineSet"); ok {
		removeFrom(ix.machinesOf, key{Namespace: m.Namespace, Name: set}, k)
	}
}

func (ix *index) deleteMachine(m *v1alpha1.Machine) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	k := keyOf(m)
	cur := ix.machines[k]
	if cur == nil {
		return
	}
	if g := ix.groupOfMachineLocked(cur); g != nil {
		expires := ix.now().Add(tombstoneTTL)
		for _, id := range []string{cur.Spec.ProviderID, autoscaler.Placeholder(cur.Namespace, cur.Name)} {
			if id != "" {
				ix.tombstones[driver.ProviderIDKey(id)] = tombstone{group: g.id, expires: expires}
			}
		}
	}
	ix.unlinkMachine(cur)
	delete(ix.machines, k)
}

// ---- MachineSets

func (ix *index) putSet(s *v1alpha1.MachineSet) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	k := keyOf(s)
	if old := ix.sets[k]; old != nil {
		if !newer(s.ResourceVersion, old.ResourceVersion) {
			return
		}
		ix.unlinkSet(old)
	}
	ix.sets[k] = s
	if md, ok := ownerName(s, "MachineDeployment"); ok {
		addTo(ix.setsOf, key{Namespace: s.Namespace, Name: md}, k, struct{}{})
	}
}

func (ix *index) unlinkSet(s *v1alpha1.MachineSet) {
	if md, ok := ownerName(s, "MachineDeployment"); ok {
		removeFrom(ix.setsOf, key{Namespace: s.Namespace, Name: md}, keyOf(s))
	}
}

func (ix *index) deleteSet(s *v1alpha1.MachineSet) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if cur := ix.sets[keyOf(s)]; cur != nil {
		ix.unlinkSet(cur)
		delete(ix.sets, keyOf(s))
	}
}

// ---- MachineDeployments

func (ix *index) putDeployment(md *v1alpha1.MachineDeployment) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	k := keyOf(md)
	old := ix.mds[k]
	if old != nil && !newer(md.ResourceVersion, old.ResourceVersion) {
		return
	}
	ix.mds[k] = md
	g, problem := ix.groupFor(md)
	// Say what is wrong once per change of the annotations, not on every status update.
	if old == nil || !maps.Equal(old.Annotations, md.Annotations) {
		if problem != "" {
			ix.log.Warn("autoscaler: MachineDeployment is not a node group", "machineDeployment", k.String(), "problem", problem)
		}
		if g != nil {
			for _, p := range g.problems {
				ix.log.Warn("autoscaler: ignoring an option annotation", "machineDeployment", k.String(), "problem", p)
			}
			if g.priceErr != nil && (old == nil || old.Annotations[fallback.AnnotationPricePerHour] != md.Annotations[fallback.AnnotationPricePerHour]) {
				ix.report(md, "MachineDeployment "+k.String(), g.priceErr)
			}
		}
	}
	ix.sorted = nil
	if g == nil {
		delete(ix.groups, GroupID(k))
		return
	}
	g.ng = autoscaler.NodeGroup{ID: g.id, MinSize: g.bounds.Min, MaxSize: g.bounds.Max, Debug: g.debug(md)}
	if v := md.Annotations[v1alpha1.AnnotationTriggerDeletionByMCM]; v != "" {
		g.marked = parseTriggerDeletion(v)
	}
	ix.groups[g.id] = g
}

// groupFor returns the group a MachineDeployment forms, or nil and why not when its size
// annotations are unusable. --nodes wins over annotations.
func (ix *index) groupFor(md *v1alpha1.MachineDeployment) (*group, string) {
	k := keyOf(md)
	g := &group{id: GroupID(k), md: k}
	if b, ok := ix.flags[k]; ok {
		g.bounds, g.source = b, "--nodes"
	} else {
		b, source, ok, problem := BoundsFromAnnotations(md.Annotations)
		if !ok {
			return nil, problem
		}
		g.bounds, g.source = b, source
	}
	g.options, g.problems = autoscaler.OptionsFromAnnotations(md.Annotations)
	if chain, _, ok := fallback.ParseAnnotations(md.Namespace, md.Spec.Template.Spec.Class.Name, md.Annotations); ok {
		g.chain = &chain
	}
	if price, set, err := fallback.PriceOf(md.Annotations); err != nil {
		g.priceErr = fmt.Errorf("%w: the node group has no price until it is fixed (Cluster Autoscaler's price expander leaves it out)", err)
	} else if set {
		g.price = &autoscaler.Price{PerHour: price, From: "MachineDeployment " + k.String()}
	}
	return g, ""
}

func (ix *index) deleteDeployment(md *v1alpha1.MachineDeployment) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	k := keyOf(md)
	delete(ix.mds, k)
	delete(ix.groups, GroupID(k))
	ix.sorted = nil
}

// ---- MachineClasses

func (ix *index) putClass(c *v1alpha1.MachineClass) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	k := keyOf(c)
	old, had := ix.classInfo[k]
	ix.classes[k] = c
	info := infoOf(c)
	ix.classInfo[k] = info
	if info.priceErr != nil && (!had || old.value != info.value) {
		ix.report(c, "MachineClass "+k.String(), info.priceErr)
	}
}

// infoOf reads a class's price and template size.
func infoOf(c *v1alpha1.MachineClass) classInfo {
	info := classInfo{value: c.Annotations[fallback.AnnotationPricePerHour]}
	price, set, err := fallback.PriceOf(c.Annotations)
	switch {
	case err != nil:
		info.priceErr = fmt.Errorf("%w: node groups on this class have no price (Cluster Autoscaler's price expander leaves them out)", err)
	case set:
		info.price, info.priced = price, true
	}
	if t := c.NodeTemplate; t != nil {
		cpu, memory := t.Capacity[corev1.ResourceCPU], t.Capacity[corev1.ResourceMemory]
		info.cpu, info.memory = float64(cpu.MilliValue())/1000, float64(memory.Value())
	}
	return info
}

func (ix *index) deleteClass(c *v1alpha1.MachineClass) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	delete(ix.classes, keyOf(c))
	delete(ix.classInfo, keyOf(c))
}

// report logs an annotation that cannot be used and passes it on to warn.
func (ix *index) report(obj runtime.Object, what string, err error) {
	ix.log.Warn("autoscaler: ignoring a price annotation", "object", what, "problem", err.Error())
	if ix.warn != nil {
		ix.warn(obj, ReasonInvalidPrice, err.Error())
	}
}

// ---- lookups (callers hold ix.mu for reading)

func (ix *index) groupOfMachineLocked(m *v1alpha1.Machine) *group {
	setName, ok := ownerName(m, "MachineSet")
	if !ok {
		return nil
	}
	set := ix.sets[key{Namespace: m.Namespace, Name: setName}]
	if set == nil {
		return nil
	}
	mdName, ok := ownerName(set, "MachineDeployment")
	if !ok {
		return nil
	}
	return ix.groups[GroupID(key{Namespace: m.Namespace, Name: mdName})]
}

// machineForNode finds the machine behind a node Cluster Autoscaler sent: our placeholder, the providerID, the
// machine's "node" label, or the node's machine-name label. Name-based matches count only when
// unambiguous across the watched namespaces.
func (ix *index) machineForNodeLocked(n autoscaler.Node) *v1alpha1.Machine {
	id := n.ID()
	if ns, name, ok := autoscaler.ParsePlaceholder(id); ok {
		return ix.machines[key{Namespace: ns, Name: name}]
	}
	if k, ok := ix.byProviderID[driver.ProviderIDKey(id)]; ok {
		return ix.machines[k]
	}
	if keys := ix.byNodeName[n.Name]; len(keys) == 1 {
		if m := ix.machines[keys[0]]; m != nil && (m.Spec.ProviderID == "" || n.ProviderID == "") {
			return m
		}
	}
	if keys := ix.byName[n.Labels[v1alpha1.LabelNodeMachineName]]; len(keys) == 1 {
		if m := ix.machines[keys[0]]; m != nil && (m.Spec.ProviderID == "" || n.ProviderID == "") {
			return m
		}
	}
	return nil
}

// eachMachineLocked calls f for every machine of a group's MachineDeployment, through its
// MachineSets, in no particular order.
func (ix *index) eachMachineLocked(g *group, f func(*v1alpha1.Machine)) {
	for set := range ix.setsOf[g.md] {
		for _, m := range ix.machinesOf[set] {
			f(m)
		}
	}
}

// countMachinesLocked returns how many machines a group has.
func (ix *index) countMachinesLocked(g *group) int {
	n := 0
	for set := range ix.setsOf[g.md] {
		n += len(ix.machinesOf[set])
	}
	return n
}

func (ix *index) sweepTombstones() {
	now := ix.now()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for id, t := range ix.tombstones {
		if now.After(t.expires) {
			delete(ix.tombstones, id)
		}
	}
}

func (g *group) debug(md *v1alpha1.MachineDeployment) string {
	var b strings.Builder
	fmt.Fprintf(&b, "MachineDeployment %s (min %d, max %d) from %s", g.md, g.bounds.Min, g.bounds.Max, g.source)
	if md != nil {
		fmt.Fprintf(&b, ", replicas %d, class %s", md.Spec.Replicas, md.Spec.Template.Spec.Class.Name)
	}
	if !g.options.IsZero() {
		fmt.Fprintf(&b, ", options %s", g.options)
	}
	if g.price != nil {
		fmt.Fprintf(&b, ", price %s", g.price)
	}
	problems := g.problems
	if g.priceErr != nil {
		problems = append(problems[:len(problems):len(problems)], g.priceErr.Error())
	}
	if len(problems) > 0 {
		fmt.Fprintf(&b, ", ignored: %s", strings.Join(problems, "; "))
	}
	return b.String()
}
