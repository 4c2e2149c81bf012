// Package static serves node groups straight from a driver, with no controller and no Machine
// objects: `machinist autoscaler --config groups.yaml`.
//
// Each group is a MachineClass and its Secret with a minimum and maximum size. Machines are named
// <group>-<5 random chars>; a group's instances are the VMs ListMachines reports under that name
// pattern, so a restart loses nothing that exists in the cloud. What only this process knows —
// creates in flight, creates that failed, deletions in progress — is kept in memory and
// reconciled with each listing.
package static

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler"
	"github.com/machinist-io/machinist/internal/waitctx"
)

// Drivers resolves a MachineClass to its driver; *registry.Resolver is one (compiled-in or
// bridged drivers alike).
type Drivers interface {
	ForClass(*v1alpha1.MachineClass) (driver.Driver, error)
}

// Defaults of Config.
const (
	DefaultResync          = time.Minute
	DefaultCreateTimeout   = 20 * time.Minute
	DefaultDeleteTimeout   = 10 * time.Minute
	DefaultMaxParallelOps  = 10
	minRefreshListInterval = 10 * time.Second
	suffixLen              = 5
)

// Config configures a Source.
type Config struct {
	// Groups to serve (LoadFile). Required.
	Groups []Group
	// Drivers resolves each group's class. Required.
	Drivers Drivers
	// Target is the cluster the nodes join; with it, deleted machines' Node objects are deleted
	// and bootstrap tokens can be minted. Nil means none.
	Target kubernetes.Interface
	// GPULabel is the node label whose values name GPU types.
	GPULabel string
	// Resync is how often every group is listed again; 0 means DefaultResync.
	Resync time.Duration
	// CreateTimeout and DeleteTimeout bound one driver call; 0 means the defaults.
	CreateTimeout, DeleteTimeout time.Duration
	// MaxParallelOps bounds concurrent creates and deletes; 0 means DefaultMaxParallelOps.
	MaxParallelOps int
	// Log is the provider's logger; nil means slog.Default().
	Log *slog.Logger
}

// vmState is what this process knows about one machine of a group.
type vmState int

const (
	// creating: CreateMachine is in flight.
	creating vmState = iota
	// running: the VM exists (created here or listed).
	running
	// failed: CreateMachine failed; Cluster Autoscaler sees the error and deletes the instance.
	failed
	// deleting: DeleteMachine is in flight or will be retried.
	deleting
	// gone: DeleteMachine succeeded; kept until a listing confirms the VM is gone, so an older
	// listing cannot resurrect it.
	gone
)

type vm struct {
	name       string
	providerID string
	state      vmState
	since      time.Time
	err        *autoscaler.InstanceError
	// nodes are the Node names Cluster Autoscaler gave when deleting (deleted from the target afterwards).
	nodes []string
	// done is closed when the create goroutine ends; cancel stops it.
	done   chan struct{}
	cancel context.CancelFunc
	// deleteErr is the last deletion failure, retried at each resync.
	deleteErr error
}

func (v *vm) counts() bool { return v.state == creating || v.state == running || v.state == failed }

type group struct {
	cfg    Group
	driver driver.Driver
	names  *regexp.Regexp
	vms    map[string]*vm
	listed time.Time // start of the last successful listing
}

// Source serves static groups. Create it with New and Start it before serving.
type Source struct {
	cfg    Config
	log    *slog.Logger
	ops    chan struct{} // semaphore of driver calls that create or delete
	kick   chan struct{}
	ready  atomic.Bool
	wg     sync.WaitGroup
	ctx    context.Context // the provider's lifetime, set by Start
	groups map[string]*group
	order  []string

	mu sync.RWMutex // guards every group's vms and listed
}

// New resolves every group's driver and checks it can list machines. It contacts no cloud.
func New(cfg Config) (*Source, error) {
	if len(cfg.Groups) == 0 {
		return nil, fmt.Errorf("autoscaler: no static groups configured")
	}
	if cfg.Drivers == nil {
		return nil, fmt.Errorf("autoscaler: static groups need a driver resolver")
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.CreateTimeout <= 0 {
		cfg.CreateTimeout = DefaultCreateTimeout
	}
	if cfg.DeleteTimeout <= 0 {
		cfg.DeleteTimeout = DefaultDeleteTimeout
	}
	if cfg.MaxParallelOps <= 0 {
		cfg.MaxParallelOps = DefaultMaxParallelOps
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	p := &Source{
		cfg: cfg, log: log, ops: make(chan struct{}, cfg.MaxParallelOps), kick: make(chan struct{}, 1),
		groups: map[string]*group{}, ctx: context.Background(),
	}
	for i := range cfg.Groups {
		g := cfg.Groups[i]
		d, err := cfg.Drivers.ForClass(g.Class)
		if err != nil {
			return nil, fmt.Errorf("autoscaler: group %q: %w", g.Name, err)
		}
		if needsToken(g.Secret) && cfg.Target == nil {
			return nil, fmt.Errorf("autoscaler: group %q: userData contains %s: pass --target-kubeconfig so bootstrap tokens can be created",
				g.Name, v1alpha1.UserDataBootstrapTokenPlaceholder)
		}
		p.groups[g.Name] = &group{
			cfg: g, driver: d, vms: map[string]*vm{},
			names: regexp.MustCompile("^" + regexp.QuoteMeta(g.Name) + "-[a-z0-9]{" + fmt.Sprint(suffixLen) + "}$"),
		}
		p.order = append(p.order, g.Name)
	}
	sort.Strings(p.order)
	return p, nil
}

// Start lists every group until each listing succeeded once (retrying with backoff, logging
// each failure), then keeps them current in the background until ctx is done. Answering Cluster Autoscaler
// before the first listing would report empty groups and make it create machines that exist.
func (p *Source) Start(ctx context.Context) error {
	p.ctx = ctx
	// Retries of the first listing wait 1s, 2s, 4s … up to a minute, across all groups.
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Cap: time.Minute, Steps: math.MaxInt32}
	for _, name := range p.order {
		for {
			err := p.list(ctx, p.groups[name])
			if err == nil {
				break
			}
			if driver.IsCode(err, driver.Unimplemented) {
				return fmt.Errorf("autoscaler: group %q: the %s driver cannot list machines, which static groups need: use MachineDeployment groups instead: %w",
					name, p.groups[name].cfg.Class.Provider, err)
			}
			delay := backoff.Step()
			p.log.Warn("autoscaler: listing a static group failed; retrying", "group", name, "in", delay, "error", err)
			if waitctx.Sleep(ctx, clock.RealClock{}, delay) != nil {
				return fmt.Errorf("autoscaler: group %q was never listed: %w", name, err)
			}
		}
	}
	p.ready.Store(true)
	p.log.Info("autoscaler: static groups loaded", "groups", len(p.order))
	p.wg.Add(1)
	go p.loop(ctx)
	return nil
}

// Ready reports whether every group was listed.
func (p *Source) Ready() bool { return p.ready.Load() }

// Wait blocks until the background loop and every create and delete started have ended
// (after ctx of Start is done).
func (p *Source) Wait() { p.wg.Wait() }

func (p *Source) loop(ctx context.Context) {
	defer p.wg.Done()
	t := time.NewTicker(p.cfg.Resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.kick:
		}
		for _, name := range p.order {
			g := p.groups[name]
			if err := p.list(ctx, g); err != nil && ctx.Err() == nil {
				p.log.Warn("autoscaler: listing a static group failed; serving the last known state", "group", name, "error", err)
			}
			p.retryDeletes(g)
		}
	}
}

// list reconciles a group with ListMachines.
func (p *Source) list(ctx context.Context, g *group) error {
	started := time.Now()
	lctx, cancel := context.WithTimeout(ctx, p.cfg.DeleteTimeout)
	defer cancel()
	resp, err := g.driver.ListMachines(lctx, &driver.ListMachinesRequest{MachineClass: g.cfg.Class, Secret: g.cfg.Secret})
	if err != nil {
		return err
	}
	byName := map[string]string{}
	for pid, name := range resp.MachineList {
		if g.names.MatchString(name) {
			byName[name] = pid
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, v := range g.vms {
		pid, present := byName[name]
		old := v.since.Before(started)
		switch v.state {
		case creating:
			if present {
				v.providerID = pid
			}
		case running:
			if present {
				v.providerID = pid
			} else if old {
				p.log.Info("autoscaler: machine vanished from the cloud", "group", g.cfg.Name, "machine", name)
				delete(g.vms, name)
			}
		case gone:
			if !present && old {
				delete(g.vms, name)
			} else if present && old {
				// Listed after its deletion succeeded: delete it again (deletion is idempotent).
				v.state, v.since, v.providerID = deleting, time.Now(), pid
				p.startDelete(g, v)
			}
		}
	}
	for name, pid := range byName {
		if _, known := g.vms[name]; !known {
			g.vms[name] = &vm{name: name, providerID: pid, state: running, since: started}
		}
	}
	g.listed = started
	return nil
}

// ---- lookups

func (p *Source) groupOf(id string) (*group, error) {
	g := p.groups[id]
	if g == nil {
		return nil, driver.Errorf(driver.NotFound, "node group %q not found: static groups are %s", id, strings.Join(p.order, ", "))
	}
	return g, nil
}

func (p *Source) nodeGroup(g *group) autoscaler.NodeGroup {
	size := 0
	for _, v := range g.vms {
		if v.counts() {
			size++
		}
	}
	price := ""
	if g.cfg.Price != nil {
		price = ", price " + g.cfg.Price.String()
	}
	return autoscaler.NodeGroup{
		ID: g.cfg.Name, MinSize: g.cfg.Min, MaxSize: g.cfg.Max,
		Debug: fmt.Sprintf("static group %s (min %d, max %d), provider %s, class %s%s, size %d, listed %s ago",
			g.cfg.Name, g.cfg.Min, g.cfg.Max, g.cfg.Class.Provider, g.cfg.Class.Name, price, size, time.Since(g.listed).Round(time.Second)),
	}
}

// NodeGroups lists the groups.
func (p *Source) NodeGroups() []autoscaler.NodeGroup {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]autoscaler.NodeGroup, 0, len(p.order))
	for _, name := range p.order {
		out = append(out, p.nodeGroup(p.groups[name]))
	}
	return out
}

// find returns the group and machine of a node: our placeholder, a known providerID, or a node
// named like one of our machines (drivers usually name the node after the machine).
func (p *Source) findLocked(n autoscaler.Node) (*group, *vm) {
	if scope, name, ok := autoscaler.ParsePlaceholder(n.ID()); ok {
		if g := p.groups[scope]; g != nil {
			return g, g.vms[name]
		}
		return nil, nil
	}
	for _, name := range p.order {
		g := p.groups[name]
		for _, v := range g.vms {
			if driver.SameProviderID(v.providerID, n.ProviderID) {
				return g, v
			}
		}
	}
	for _, name := range p.order {
		g := p.groups[name]
		if v := g.vms[n.Name]; v != nil && (n.ProviderID == "" || v.providerID == "") {
			return g, v
		}
	}
	return nil, nil
}

// NodeGroupForNode resolves a node or placeholder to its group.
func (p *Source) NodeGroupForNode(n autoscaler.Node) (autoscaler.NodeGroup, bool, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	g, v := p.findLocked(n)
	if g == nil || v == nil {
		return autoscaler.NodeGroup{}, false, nil
	}
	return p.nodeGroup(g), true, nil
}

// TargetSize counts machines being created, running, or whose create failed (until Cluster Autoscaler deletes
// them).
func (p *Source) TargetSize(_ context.Context, id string) (int, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	g, err := p.groupOf(id)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range g.vms {
		if v.counts() {
			n++
		}
	}
	return n, nil
}

// Nodes lists the group's instances.
func (p *Source) Nodes(_ context.Context, id string) ([]autoscaler.Instance, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	g, err := p.groupOf(id)
	if err != nil {
		return nil, err
	}
	out := make([]autoscaler.Instance, 0, len(g.vms))
	for _, v := range g.vms {
		if v.state == gone {
			continue
		}
		in := autoscaler.Instance{ID: autoscaler.InstanceID(v.providerID)}
		if in.ID == "" {
			in.ID = autoscaler.Placeholder(g.cfg.Name, v.name)
		}
		switch v.state {
		case creating:
			in.State = autoscaler.StateCreating
		case failed:
			in.State, in.Error = autoscaler.StateCreating, v.err
		case deleting:
			in.State = autoscaler.StateDeleting
		default:
			in.State = autoscaler.StateRunning
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// ---- scaling

// IncreaseSize starts delta creates and returns: the new machines show as Creating
// placeholders until their create returns.
func (p *Source) IncreaseSize(_ context.Context, id string, delta int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	g, err := p.groupOf(id)
	if err != nil {
		return err
	}
	size := 0
	for _, v := range g.vms {
		if v.counts() {
			size++
		}
	}
	if size+delta > g.cfg.Max {
		return driver.Errorf(driver.FailedPrecondition, "node group %q: increasing %d by %d would exceed the maximum size %d", id, size, delta, g.cfg.Max)
	}
	for range delta {
		name := g.cfg.Name + "-" + randomString(suffixLen)
		for g.vms[name] != nil {
			name = g.cfg.Name + "-" + randomString(suffixLen)
		}
		ctx, cancel := context.WithTimeout(p.ctx, p.cfg.CreateTimeout)
		v := &vm{name: name, state: creating, since: time.Now(), done: make(chan struct{}), cancel: cancel}
		g.vms[name] = v
		p.wg.Add(1)
		go p.create(ctx, g, v)
	}
	p.log.Info("autoscaler: creating machines", "group", id, "count", delta, "target", size+delta)
	return nil
}

func (p *Source) create(ctx context.Context, g *group, v *vm) {
	defer p.wg.Done()
	defer close(v.done)
	defer v.cancel()
	resp, err := p.createMachine(ctx, g, v.name)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil && resp != nil && v.providerID == "" {
		v.providerID = resp.ProviderID // a deletion waiting for this create uses it
	}
	if v.state != creating {
		return // deleted meanwhile; the deletion cleans up
	}
	v.since = time.Now()
	if err != nil {
		st := driver.StatusOf(err)
		class := autoscaler.ErrorClassOther
		if st.Code() == driver.ResourceExhausted {
			class = autoscaler.ErrorClassOutOfResources
		}
		v.state = failed
		v.err = &autoscaler.InstanceError{Code: st.Code().String(), Message: st.Message(), Class: class}
		p.log.Warn("autoscaler: creating a machine failed", "group", g.cfg.Name, "machine", v.name, "code", st.Code().String(), "error", st.Message())
		return
	}
	v.state, v.providerID = running, resp.ProviderID
	p.log.Info("autoscaler: machine created", "group", g.cfg.Name, "machine", v.name, "providerID", resp.ProviderID)
}

func (p *Source) createMachine(ctx context.Context, g *group, name string) (*driver.CreateMachineResponse, error) {
	select {
	case p.ops <- struct{}{}:
		defer func() { <-p.ops }()
	case <-ctx.Done():
		return nil, driver.Wrap(driver.DeadlineExceeded, ctx.Err(), "waiting for a free create slot")
	}
	secret, err := machineSecret(ctx, &g.cfg, name, p.cfg.Target, p.cfg.CreateTimeout)
	if err != nil {
		return nil, driver.Wrap(driver.Unavailable, err, "autoscaler")
	}
	return g.driver.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: p.machine(g, name, ""), MachineClass: g.cfg.Class, Secret: secret})
}

// machine is the Machine object a driver call is about; static groups have none stored.
func (p *Source) machine(g *group, name, providerID string) *v1alpha1.Machine {
	return &v1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: g.cfg.Class.Namespace, Labels: map[string]string{"autoscaler.machinist.io/group": g.cfg.Name}},
		Spec: v1alpha1.MachineSpec{
			Class:      v1alpha1.ClassSpec{APIGroup: v1alpha1.GroupName, Kind: "MachineClass", Name: g.cfg.Class.Name},
			ProviderID: providerID,
			NodeTemplateSpec: v1alpha1.NodeTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: g.cfg.NodeLabels},
				Spec:       corev1.NodeSpec{Taints: g.cfg.NodeTaints},
			},
		},
	}
}

// DeleteNodes deletes exactly the named nodes' machines: the target drops at once, the VMs are
// deleted in the background (retried at each resync until they are gone) and, with a target
// cluster, their Node objects after them.
func (p *Source) DeleteNodes(_ context.Context, id string, nodes []autoscaler.Node) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	g, err := p.groupOf(id)
	if err != nil {
		return err
	}
	var victims []*vm
	for _, n := range nodes {
		og, v := p.findLocked(n)
		if v == nil {
			return driver.Errorf(driver.NotFound, "node group %q: node %q (providerID %q) is not a machine of any static group; nothing was deleted", id, n.Name, n.ProviderID)
		}
		if og != g {
			return driver.Errorf(driver.InvalidArgument, "node group %q: node %q belongs to node group %q; nothing was deleted", id, n.Name, og.cfg.Name)
		}
		if !v.counts() {
			continue // already being deleted
		}
		// Cluster Autoscaler's fake nodes (name = instance id) have no Node object to delete.
		isNodeName := n.Name != n.ProviderID && len(validation.IsDNS1123Subdomain(n.Name)) == 0
		if isNodeName && !slices.Contains(v.nodes, n.Name) {
			v.nodes = append(v.nodes, n.Name)
		}
		if !slices.Contains(victims, v) {
			victims = append(victims, v)
		}
	}
	size := 0
	for _, v := range g.vms {
		if v.counts() {
			size++
		}
	}
	if size-len(victims) < g.cfg.Min {
		return driver.Errorf(driver.FailedPrecondition, "node group %q: deleting %d node(s) would bring the size from %d below the minimum %d", id, len(victims), size, g.cfg.Min)
	}
	for _, v := range victims {
		v.state, v.since = deleting, time.Now()
		p.startDelete(g, v)
	}
	if len(victims) > 0 {
		p.log.Info("autoscaler: deleting machines", "group", id, "count", len(victims), "target", size-len(victims))
	}
	return nil
}

// startDelete deletes a machine in the background. Callers hold p.mu and have set deleting.
func (p *Source) startDelete(g *group, v *vm) {
	if v.cancel != nil {
		v.cancel() // stop a create in flight; the deletion then cleans up what it left
	}
	v.deleteErr = nil
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if v.done != nil {
			<-v.done
		}
		err := p.deleteMachine(g, v)
		p.mu.Lock()
		defer p.mu.Unlock()
		if v.state != deleting {
			return
		}
		if err != nil {
			v.deleteErr = err
			p.log.Warn("autoscaler: deleting a machine failed; retrying at the next resync", "group", g.cfg.Name, "machine", v.name, "error", err)
			return
		}
		v.state, v.since = gone, time.Now()
		p.log.Info("autoscaler: machine deleted", "group", g.cfg.Name, "machine", v.name)
	}()
}

func (p *Source) deleteMachine(g *group, v *vm) error {
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.DeleteTimeout)
	defer cancel()
	select {
	case p.ops <- struct{}{}:
		defer func() { <-p.ops }()
	case <-ctx.Done():
		return ctx.Err()
	}
	p.mu.RLock()
	providerID, nodes := v.providerID, append([]string(nil), v.nodes...)
	p.mu.RUnlock()
	if _, err := g.driver.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: p.machine(g, v.name, providerID), MachineClass: g.cfg.Class, Secret: g.cfg.Secret}); err != nil {
		return err
	}
	if p.cfg.Target != nil {
		for _, node := range append(nodes, v.name) {
			if err := p.deleteNode(ctx, node, providerID); err != nil {
				return err
			}
		}
	}
	return nil
}

// deleteNode deletes a Node of a deleted machine, only if it is that machine's node (same
// providerID, or none yet), so a reused name never takes another machine's node with it.
func (p *Source) deleteNode(ctx context.Context, name, providerID string) error {
	nodes := p.cfg.Target.CoreV1().Nodes()
	n, err := nodes.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get node %s: %w", name, err)
	}
	if n.Spec.ProviderID != "" && providerID != "" && !driver.SameProviderID(n.Spec.ProviderID, providerID) {
		return nil
	}
	err = nodes.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &n.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete node %s: %w", name, err)
	}
	return nil
}

func (p *Source) retryDeletes(g *group) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, v := range g.vms {
		if v.state == deleting && v.deleteErr != nil {
			p.startDelete(g, v)
		}
	}
}

// DecreaseTargetSize drops creates that have not produced a VM yet (in flight or failed),
// newest first; it never touches a running machine.
func (p *Source) DecreaseTargetSize(_ context.Context, id string, delta int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	g, err := p.groupOf(id)
	if err != nil {
		return err
	}
	var pending []*vm
	for _, v := range g.vms {
		if (v.state == creating || v.state == failed) && v.providerID == "" {
			pending = append(pending, v)
		}
	}
	if -delta > len(pending) {
		return driver.Errorf(driver.FailedPrecondition,
			"node group %q: cannot drop %d unfulfilled request(s), only %d are pending; delete nodes with NodeGroupDeleteNodes", id, -delta, len(pending))
	}
	size := 0
	for _, v := range g.vms {
		if v.counts() {
			size++
		}
	}
	drop := min(-delta, size-g.cfg.Min)
	if drop < -delta {
		p.log.Info("autoscaler: target decrease stops at the minimum size", "group", id, "requested", size+delta, "min", g.cfg.Min)
	}
	sort.Slice(pending, func(i, j int) bool { return pending[i].since.After(pending[j].since) })
	for _, v := range pending[:max(drop, 0)] {
		v.state, v.since = deleting, time.Now()
		p.startDelete(g, v)
	}
	return nil
}

// TemplateNode builds the group's node from its class's nodeTemplate and the group's node
// labels and taints.
func (p *Source) TemplateNode(_ context.Context, id string) (*corev1.Node, error) {
	g, err := p.groupOf(id)
	if err != nil {
		return nil, err
	}
	return autoscaler.BuildTemplateNode(autoscaler.TemplateSpec{
		GroupID: id, ClassName: g.cfg.Class.Name, NodeTemplate: g.cfg.Class.NodeTemplate,
		Labels: g.cfg.NodeLabels, Taints: g.cfg.NodeTaints,
	})
}

// GroupPrice is the group's price from the config file.
func (p *Source) GroupPrice(id string) (autoscaler.Price, error) {
	g, err := p.groupOf(id)
	if err != nil {
		return autoscaler.Price{}, err
	}
	if g.cfg.Price == nil {
		return autoscaler.Price{}, fmt.Errorf("static group %q has no price: set its pricePerHour (or the class's %s) for Cluster Autoscaler's price expander: %w",
			id, autoscaler.AnnotationPricePerHour, autoscaler.ErrNoPrice)
	}
	return *g.cfg.Price, nil
}

// NodePrice is the price of the group of a node: every machine of a static group has its class.
func (p *Source) NodePrice(n autoscaler.Node) (autoscaler.Price, error) {
	p.mu.RLock()
	g, v := p.findLocked(n)
	p.mu.RUnlock()
	if g == nil || v == nil {
		return autoscaler.Price{}, driver.Errorf(driver.NotFound, "node %q (providerID %q) is not a machine of any static group", n.Name, n.ProviderID)
	}
	return p.GroupPrice(g.cfg.Name)
}

// GroupShapes are the price and template size of every priced group with a node template.
func (p *Source) GroupShapes() []autoscaler.GroupShape {
	var out []autoscaler.GroupShape
	for _, name := range p.order {
		g := p.groups[name]
		t := g.cfg.Class.NodeTemplate
		if g.cfg.Price == nil || t == nil {
			continue
		}
		cpu, memory := t.Capacity[corev1.ResourceCPU], t.Capacity[corev1.ResourceMemory]
		out = append(out, autoscaler.GroupShape{Price: *g.cfg.Price, CPU: float64(cpu.MilliValue()) / 1000, Memory: float64(memory.Value())})
	}
	return out
}

// Options are the group's options from the config file.
func (p *Source) Options(_ context.Context, id string) (autoscaler.Options, error) {
	g, err := p.groupOf(id)
	if err != nil {
		return autoscaler.Options{}, err
	}
	return g.cfg.Options, nil
}

// GPUTypes are the distinct values of the GPU label among the groups' node labels.
func (p *Source) GPUTypes() []string {
	if p.cfg.GPULabel == "" {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, name := range p.order {
		if v := p.groups[name].cfg.NodeLabels[p.cfg.GPULabel]; v != "" && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

// Refresh asks the background loop for a new listing when the last one is older than 10 s and
// returns at once: Cluster Autoscaler's loop never waits for the cloud, and a failing cloud is logged, not
// reported (Cluster Autoscaler would abort its whole loop).
func (p *Source) Refresh(context.Context) error {
	p.mu.RLock()
	stale := false
	for _, g := range p.groups {
		stale = stale || time.Since(g.listed) > minRefreshListInterval
	}
	p.mu.RUnlock()
	if stale {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

var _ autoscaler.NodeGroupSource = (*Source)(nil)
