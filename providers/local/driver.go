package local

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
)

const (
	// ProviderName is the local provider's registry name and MachineClass.provider value.
	ProviderName = "local"
	// ProviderIDPrefix starts every local ProviderID: local:///<machine>.
	ProviderIDPrefix = "local:///"
	// CSIDriverName is the CSI driver whose volumes GetVolumeIDs reports (volumeHandle = ID).
	CSIDriverName = "local.csi.machinist.io"
	// SecretKeyKubeconfig in a class's secret names the cluster the class's nodes join,
	// overriding the process's target cluster.
	SecretKeyKubeconfig = "kubeconfig"
	// StateSubdir is the directory under registry.Env.StateDir the provider keeps its state in.
	StateSubdir = "local"
)

// Tunables; tests shorten them through options.
const (
	defaultWorkers      = 16
	agentsPerWorker     = 25  // beyond 16 × 25 agents, one more worker per 25
	maxWorkers          = 256 // requests in flight at most
	defaultSyncInterval = time.Second
	nodeDeleteTimeout   = 10 * time.Second
	minClientQPS        = 500
	minClientBurst      = 1000
)

// Driver is the local provider: each machine is a record in the state directory plus a node
// agent that makes it a real Node of the target cluster. It is safe for concurrent use.
//
// Driver itself is the machine lifecycle of the driver contract over the state store
// (store.go); its fleet runs the node agents (fleet.go, handover.go), the fleet's updater
// updates nodes in place (update.go).
//
// Several processes may open one state directory. The one holding host.lock is the host: it
// runs the node agents of every machine in the directory and picks up machines other
// processes create or delete (and heartbeat switches they flip) within a second. When the
// host exits, another process takes over.
type Driver struct {
	*deps
	fleet *fleet

	mu       sync.Mutex
	failures map[string]int // injected error counts, by "op/machine"
}

// New opens the local driver. With env.StateDir set, machines persist in
// <StateDir>/local and their agents come back when a process opens the directory again.
func New(env registry.Env) (*Driver, error) {
	return newDriver(env, defaultWorkers, defaultSyncInterval)
}

func newDriver(env registry.Env, workers int, syncInterval time.Duration) (*Driver, error) {
	target, err := targetConfig(env.Target)
	if err != nil {
		return nil, err
	}
	dp := &deps{env: env, target: target, log: env.Logger().With("provider", ProviderName)}
	f := &fleet{deps: dp, syncInterval: syncInterval, agents: map[string]*agent{}, clusters: map[string]*cluster{}}
	f.updates = newUpdater(dp, f)
	d := &Driver{deps: dp, fleet: f, failures: map[string]int{}}
	f.sched = newScheduler(workers, func(ctx context.Context, a *agent) time.Time { return a.beat(ctx, time.Now()) })
	f.sched.start()
	if env.StateDir == "" {
		dp.store = newMemStore()
		f.host = true
		return d, nil
	}
	dp.stateDir = filepath.Join(env.StateDir, StateSubdir)
	ds, err := newDirStore(dp.stateDir)
	if err != nil {
		f.sched.stop()
		f.updates.stop()
		return nil, err
	}
	dp.store = ds
	f.lock = &hostLock{path: filepath.Join(dp.stateDir, "host.lock")}
	f.stopSync = make(chan struct{})
	f.syncDone = make(chan struct{})
	f.sync()
	go f.syncLoop()
	return d, nil
}

// Close stops the node agents (the machines persist in the state dir) and releases the host
// lock. Nodes keep their last status until a process hosts the state dir again.
func (d *Driver) Close() error {
	d.fleet.close()
	return nil
}

// IsHost reports whether this driver runs the node agents of its state directory.
func (d *Driver) IsHost() bool { return d.fleet.isHost() }

// StateDir returns the directory the driver keeps its machines in, or "".
func (d *Driver) StateDir() string { return d.stateDir }

// CreateMachine records the machine and starts its node agent, or returns the existing machine.
// With bootDelay 0 and a target cluster, the node is registered before it returns.
func (d *Driver) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	if req == nil {
		return nil, driver.Error(driver.InvalidArgument, "local: create machine: empty request")
	}
	if err := ctxErr(ctx, "create machine"); err != nil {
		return nil, err
	}
	name, err := machineName(req.Machine)
	if err != nil {
		return nil, err
	}
	spec, ms, err := classSpec(req.MachineClass, d.env.SpecMode)
	if err != nil {
		return nil, err
	}
	target, err := d.secretTarget(req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	if err := d.inject(spec.CreateError, "createError", name); err != nil {
		return nil, err
	}

	shape, err := shapeFor(name, ms, req.MachineClass, req.Machine)
	if err != nil {
		return nil, err
	}

	unlock := d.lockName(name)
	defer unlock()
	rec, err := d.store.get(name)
	if errors.Is(err, errNotFound) {
		rec = &record{
			Name:       name,
			Class:      req.MachineClass.Name,
			ProviderID: ProviderIDPrefix + name,
			Target:     target,
			InternalIP: internalIP(name),
			Spec:       *ms,
			CreatedAt:  time.Now().UTC().Truncate(time.Millisecond),
			Node:       &shape,
		}
		if err := d.claimPodCIDR(rec); err != nil {
			return nil, driver.Wrap(driver.ResourceExhausted, err, "local: create machine "+name)
		}
		err = d.store.create(rec)
		if err != nil {
			d.releasePodCIDR(rec)
		}
		if errors.Is(err, errExists) { // another process won the race
			rec, err = d.store.get(name)
		} else if err == nil {
			d.log.Info("local: machine created", "machine", name, "cluster", ms.Cluster, "podCIDR", rec.PodCIDR)
		}
	}
	if err != nil {
		return nil, driver.Wrap(driver.Internal, err, "local: create machine "+name)
	}
	if rec.Spec.Cluster != ms.Cluster {
		return nil, driver.Errorf(driver.AlreadyExists,
			"local: machine %q already exists in cluster %q, not %q: delete it there or choose another machine name",
			name, rec.Spec.Cluster, ms.Cluster)
	}
	if a, isNew := d.fleet.addAgentLocked(rec); isNew {
		if rec.Spec.BootDelay == 0 {
			// Register now so the node exists when create returns; failures are retried.
			d.fleet.sched.schedule(a, a.beat(ctx, time.Now()))
		} else {
			d.fleet.sched.schedule(a, a.bootAt())
		}
	}
	return &driver.CreateMachineResponse{
		ProviderID: rec.ProviderID,
		NodeName:   rec.Name,
		Addresses:  addresses(rec),
	}, nil
}

// InitializeMachine is not needed: a local machine is ready once created.
func (d *Driver) InitializeMachine(context.Context, *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	return nil, driver.Error(driver.Unimplemented, "local: InitializeMachine is not implemented: local machines need no initialization")
}

// DeleteMachine stops the machine's node agent, deletes its Node and Lease (as a cloud
// controller manager would once the VM is gone; best effort, the machine controller deletes
// the Node too) and forgets the machine. An absent machine, or one of another cluster, is OK.
func (d *Driver) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	if req == nil {
		return nil, driver.Error(driver.InvalidArgument, "local: delete machine: empty request")
	}
	if err := ctxErr(ctx, "delete machine"); err != nil {
		return nil, err
	}
	name, err := machineName(req.Machine)
	if err != nil {
		return nil, err
	}
	spec, ms, err := classSpec(req.MachineClass, d.env.SpecMode)
	if err != nil {
		return nil, err
	}
	if err := d.inject(spec.DeleteError, "deleteError", name); err != nil {
		return nil, err
	}
	unlock := d.lockName(name)
	defer unlock()
	rec, err := d.store.get(name)
	if errors.Is(err, errNotFound) {
		return &driver.DeleteMachineResponse{}, nil
	}
	if err != nil {
		return nil, driver.Wrap(driver.Internal, err, "local: delete machine "+name)
	}
	if rec.Spec.Cluster != ms.Cluster {
		// Not this class's cluster: as a cloud scoped by tags, there is nothing to delete.
		return &driver.DeleteMachineResponse{}, nil
	}
	a := d.fleet.removeAgentLocked(name)
	var c *cluster
	if a != nil {
		c = a.cluster
	} else {
		c, _ = d.fleet.cluster(rec.Target)
	}
	if c != nil {
		c.deleteNode(d.log, name)
	}
	if err := d.store.remove(name); err != nil {
		return nil, driver.Wrap(driver.Internal, err, "local: delete machine "+name)
	}
	d.releasePodCIDR(rec)
	d.log.Info("local: machine deleted", "machine", name)
	return &driver.DeleteMachineResponse{}, nil
}

// GetMachineStatus reports an existing machine; NotFound when absent or in another cluster.
func (d *Driver) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	if req == nil {
		return nil, driver.Error(driver.InvalidArgument, "local: get machine status: empty request")
	}
	if err := ctxErr(ctx, "get machine status"); err != nil {
		return nil, err
	}
	name, err := machineName(req.Machine)
	if err != nil {
		return nil, err
	}
	_, ms, err := classSpec(req.MachineClass, d.env.SpecMode)
	if err != nil {
		return nil, err
	}
	rec, err := d.store.get(name)
	if errors.Is(err, errNotFound) || (err == nil && rec.Spec.Cluster != ms.Cluster) {
		return nil, driver.Errorf(driver.NotFound, "local: machine %q does not exist in cluster %q", name, ms.Cluster)
	}
	if err != nil {
		return nil, driver.Wrap(driver.Internal, err, "local: get machine status "+name)
	}
	return &driver.GetMachineStatusResponse{ProviderID: rec.ProviderID, NodeName: rec.Name, Addresses: addresses(rec)}, nil
}

// ListMachines returns the machines of the class's cluster as ProviderID -> machine name.
func (d *Driver) ListMachines(ctx context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	if req == nil {
		return nil, driver.Error(driver.InvalidArgument, "local: list machines: empty request")
	}
	if err := ctxErr(ctx, "list machines"); err != nil {
		return nil, err
	}
	_, ms, err := classSpec(req.MachineClass, d.env.SpecMode)
	if err != nil {
		return nil, err
	}
	recs, err := d.store.list()
	if err != nil {
		return nil, driver.Wrap(driver.Internal, err, "local: list machines")
	}
	out := map[string]string{}
	for _, r := range recs {
		if r.Spec.Cluster == ms.Cluster {
			out[r.ProviderID] = r.Name
		}
	}
	return &driver.ListMachinesResponse{MachineList: out}, nil
}

// GetVolumeIDs returns the volume handles of CSI volumes of local.csi.machinist.io and skips
// every other volume: hostPath and local volumes are node-local, not provider volumes that
// must detach before a node goes away.
func (d *Driver) GetVolumeIDs(ctx context.Context, req *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	if err := ctxErr(ctx, "get volume IDs"); err != nil {
		return nil, err
	}
	ids := []string{}
	if req != nil {
		for _, spec := range req.PVSpecs {
			if spec != nil && spec.CSI != nil && spec.CSI.Driver == CSIDriverName && spec.CSI.VolumeHandle != "" {
				ids = append(ids, spec.CSI.VolumeHandle)
			}
		}
	}
	return &driver.GetVolumeIDsResponse{VolumeIDs: ids}, nil
}

// SetHeartbeat flips the heartbeat switch of a machine: stopped, its node stops renewing its
// Lease and turns Unknown after nodeMonitorGracePeriod; running again, it turns Ready. The
// switch is kept in the state dir, so the host process applies it whoever sets it.
func (d *Driver) SetHeartbeat(ctx context.Context, machine string, running bool) error {
	if err := ctxErr(ctx, "set heartbeat"); err != nil {
		return err
	}
	if err := setHeartbeat(d.store, machine, running); err != nil {
		return err
	}
	if a := d.fleet.agent(machine); a != nil {
		state, _ := d.store.heartbeat(machine)
		d.fleet.applySwitch(a, state)
	}
	return nil
}

// HeartbeatRunning reports whether a machine's heartbeat is running (its switch, else its
// providerSpec.stopHeartbeat).
func (d *Driver) HeartbeatRunning(ctx context.Context, machine string) (bool, error) {
	if err := ctxErr(ctx, "heartbeat"); err != nil {
		return false, err
	}
	rec, err := d.store.get(machine)
	if errors.Is(err, errNotFound) {
		return false, driver.Errorf(driver.NotFound, "local: no machine %q here: check the name and --state-dir", machine)
	}
	if err != nil {
		return false, driver.Wrap(driver.Internal, err, "local: heartbeat")
	}
	state, err := d.store.heartbeat(machine)
	if err != nil {
		return false, driver.Wrap(driver.Internal, err, "local: heartbeat")
	}
	switch state {
	case heartbeatStopped:
		return false, nil
	case heartbeatRunning:
		return true, nil
	}
	return !rec.Spec.StopHeartbeat, nil
}

// SetHeartbeat flips the heartbeat switch of a machine in a state dir (registry.Env.StateDir)
// without opening a driver; the process hosting the state dir applies it within a second.
func SetHeartbeat(stateDir, machine string, running bool) error {
	if stateDir == "" {
		return driver.Error(driver.InvalidArgument, "local: set heartbeat: no state dir: the switch lives in the state dir of the process running the machines")
	}
	s, err := newDirStore(filepath.Join(stateDir, StateSubdir))
	if err != nil {
		return err
	}
	return setHeartbeat(s, machine, running)
}

func setHeartbeat(s store, machine string, running bool) error {
	if _, err := s.get(machine); errors.Is(err, errNotFound) {
		return driver.Errorf(driver.NotFound, "local: no machine %q here: check the name and --state-dir", machine)
	} else if err != nil {
		return driver.Wrap(driver.Internal, err, "local: set heartbeat")
	}
	state := heartbeatStopped
	if running {
		state = heartbeatRunning
	}
	if err := s.setHeartbeat(machine, state); err != nil {
		return driver.Wrap(driver.Internal, err, "local: set heartbeat of "+machine)
	}
	return nil
}

// secretTarget keeps the class secret's kubeconfig, if any, and returns its target id.
func (d *Driver) secretTarget(class *v1alpha1.MachineClass, secret *corev1.Secret) (string, error) {
	kc := driver.SecretValue(secret, SecretKeyKubeconfig)
	if kc == "" {
		return "", nil
	}
	if _, err := clientcmd.RESTConfigFromKubeConfig([]byte(kc)); err != nil {
		// Never echo the kubeconfig: it holds credentials.
		return "", driver.Errorf(driver.InvalidArgument,
			"local: machineClass %q: secret key %q is not a usable kubeconfig: fix it or remove the key to use the process's target cluster",
			class.Name, SecretKeyKubeconfig)
	}
	id, err := d.store.putTarget([]byte(kc))
	if err != nil {
		return "", driver.Wrap(driver.Internal, err, "local")
	}
	return id, nil
}

// inject returns the injected error of a spec field while its count lasts.
func (d *Driver) inject(e *InjectedError, fieldName, machine string) error {
	if e == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	key := fieldName + "/" + machine
	if e.Times > 0 && d.failures[key] >= e.Times {
		return nil
	}
	d.failures[key]++
	return e.err(fieldName)
}

// machineName returns the machine's name, from spec.providerID when set.
func machineName(m *v1alpha1.Machine) (string, error) {
	if m == nil {
		return "", driver.Error(driver.InvalidArgument, "local: machine is missing from the request")
	}
	name := m.Name
	if pid := m.Spec.ProviderID; pid != "" {
		n, ok := strings.CutPrefix(pid, ProviderIDPrefix)
		if !ok || n == "" || strings.Contains(n, "/") {
			return "", driver.Errorf(driver.InvalidArgument,
				"local: machine %q: spec.providerID %q is not a local providerID (local:///<machine>): clear it or use a class of the provider that made it", m.Name, pid)
		}
		name = n
	}
	if name == "" {
		return "", driver.Error(driver.InvalidArgument, "local: machine has no name: set metadata.name")
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return "", driver.Errorf(driver.InvalidArgument, "local: machine name %q: %s", name, strings.Join(msgs, "; "))
	}
	return name, nil
}

// ctxErr maps a done context to Canceled or DeadlineExceeded.
func ctxErr(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		code := driver.Canceled
		if errors.Is(err, context.DeadlineExceeded) {
			code = driver.DeadlineExceeded
		}
		return driver.Wrap(code, err, "local: "+op)
	}
	return nil
}

// internalIP derives a stable address in 10.0.0.0/8 from the machine name.
func internalIP(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	v := h.Sum32()
	return fmt.Sprintf("10.%d.%d.%d", (v>>16)&0xff, (v>>8)&0xff, 1+(v&0xff)%254)
}

func addresses(r *record) []corev1.NodeAddress {
	return []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: r.InternalIP},
		{Type: corev1.NodeHostName, Address: r.Name},
	}
}

var _ driver.Driver = (*Driver)(nil)
