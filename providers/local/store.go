package local

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// record is one local machine: what a cloud would keep about a VM.
type record struct {
	Name       string `json:"name"`
	Class      string `json:"class"`
	ProviderID string `json:"providerID"`
	// Target names the cluster the node joins: "" is the hosting process's target
	// (registry.Env.Target), otherwise the id of a kubeconfig from the class's secret.
	Target     string      `json:"target,omitempty"`
	InternalIP string      `json:"internalIP"`
	Spec       machineSpec `json:"spec"`
	CreatedAt  time.Time   `json:"createdAt"`
	// PodCIDR is the node's spec.podCIDR, claimed in the store when the machine is created.
	PodCIDR string `json:"podCIDR,omitempty"`
	// Node is what the node registers with; machines recorded before it was kept have none
	// and register with the shape of their providerSpec.
	Node *nodeShape `json:"node,omitempty"`
	// RestartAt is when the node of a machine started after a stop registers again (its boot
	// after StartMachine); zero for a machine never stopped.
	RestartAt time.Time `json:"restartAt,omitempty"`
}

// shape returns what the machine's node registers with.
func (r *record) shape() nodeShape {
	if r.Node != nil {
		return *r.Node
	}
	return legacyShape(r.Name, &r.Spec)
}

// heartbeat switch states; unset means the machine's providerSpec.stopHeartbeat decides.
const (
	heartbeatUnset   = ""
	heartbeatStopped = "stopped"
	heartbeatRunning = "running"
)

var (
	errNotFound = errors.New("not found")
	errExists   = errors.New("already exists")
)

// store keeps the machine records and heartbeat switches. dirStore shares them between
// processes through a state directory; memStore keeps them in memory (no state dir).
type store interface {
	get(name string) (*record, error) // errNotFound when absent
	create(r *record) error           // errExists when present
	update(r *record) error           // replaces an existing record
	remove(name string) error         // nil when absent
	list() ([]*record, error)
	names() ([]string, error)
	heartbeat(name string) (string, error)
	setHeartbeat(name, state string) error
	heartbeats() (map[string]string, error)
	// setStopped records whether a machine's VM is stopped (StopMachine); stopped lists those
	// that are. A stopped machine keeps its record but has no node agent.
	setStopped(name string, stopped bool) error
	stopped() (map[string]bool, error)
	putTarget(kubeconfig []byte) (string, error)
	target(id string) ([]byte, error)
	// claimPodCIDR claims a free pod CIDR index (see ipam.go) for machine; errNoPodCIDR when
	// all are taken. releasePodCIDR frees it if machine still holds it.
	claimPodCIDR(machine string) (int, error)
	releasePodCIDR(index int, machine string) error
}

// targetID names a kubeconfig by its content.
func targetID(kubeconfig []byte) string {
	sum := sha256.Sum256(kubeconfig)
	return hex.EncodeToString(sum[:8])
}

// dirStore is the state directory layout (see README.md):
//
//	machines/<machine>.json     one record per machine, written atomically
//	heartbeat/<machine>         the heartbeat switch: "stopped" or "running"
//	power/<machine>             present while the machine's VM is stopped (StopMachine)
//	targets/<id>.kubeconfig     kubeconfigs from class secrets (mode 0600)
//	podcidrs/<index>            a claimed pod CIDR: holds the machine's name
//	tmp/                        files being written, linked or renamed into place when complete
//	host.lock                   held by the process that runs the node agents
//	host.wanted                 kept fresh by a process with a target waiting for host.lock
type dirStore struct {
	dir string
	// nextCIDR is where the search for a free pod CIDR starts (claims are exclusive file
	// creations, so processes sharing the dir never claim one twice).
	nextCIDR atomic.Int32
}

func newDirStore(dir string) (*dirStore, error) {
	for _, sub := range []string{"machines", "heartbeat", "power", "targets", "podcidrs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("local: state dir: %w", err)
		}
	}
	return &dirStore{dir: dir}, nil
}

func (s *dirStore) recordPath(name string) string {
	return filepath.Join(s.dir, "machines", name+".json")
}

func (s *dirStore) get(name string) (*record, error) {
	b, err := os.ReadFile(s.recordPath(name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("local: read machine %s: %w", name, err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("local: machine record %s is corrupt (delete it to forget the machine): %w", s.recordPath(name), err)
	}
	return &r, nil
}

func (s *dirStore) create(r *record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	// Link fails when the record exists, so two processes creating one machine agree on a
	// single winner, and readers never see a half-written file.
	return s.writeAtomic(s.recordPath(r.Name), b, true)
}

func (s *dirStore) update(r *record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return s.writeAtomic(s.recordPath(r.Name), b, false)
}

func (s *dirStore) claimPodCIDR(machine string) (int, error) {
	start := int(s.nextCIDR.Load())
	for i := range podCIDRs {
		index := (start + i) % podCIDRs
		// An exclusive create is the claim; the name inside only guards the release.
		f, err := os.OpenFile(s.cidrPath(index), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		_, err = f.WriteString(machine + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return 0, err
		}
		s.nextCIDR.Store(int32((index + 1) % podCIDRs))
		return index, nil
	}
	return 0, errNoPodCIDR
}

func (s *dirStore) releasePodCIDR(index int, machine string) error {
	path := s.cidrPath(index)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) || (err == nil && strings.TrimSpace(string(b)) != machine) {
		return nil
	}
	if err == nil {
		err = os.Remove(path)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("local: release pod CIDR of %s: %w", machine, err)
	}
	return nil
}

func (s *dirStore) cidrPath(index int) string {
	return filepath.Join(s.dir, "podcidrs", strconv.Itoa(index))
}

func (s *dirStore) remove(name string) error {
	if err := os.Remove(s.recordPath(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("local: forget machine %s: %w", name, err)
	}
	for _, sub := range []string{"heartbeat", "power"} {
		if err := os.Remove(filepath.Join(s.dir, sub, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("local: forget machine %s: %w", name, err)
		}
	}
	return nil
}

func (s *dirStore) setStopped(name string, stopped bool) error {
	path := filepath.Join(s.dir, "power", name)
	if stopped {
		return s.writeAtomic(path, []byte("stopped\n"), false)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (s *dirStore) stopped() (map[string]bool, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, "power"))
	if err != nil {
		return nil, fmt.Errorf("local: read stopped machines: %w", err)
	}
	out := make(map[string]bool, len(entries))
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			out[e.Name()] = true
		}
	}
	return out, nil
}

func (s *dirStore) names() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, "machines"))
	if err != nil {
		return nil, fmt.Errorf("local: list machines: %w", err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok && !strings.HasPrefix(n, ".") {
			names = append(names, n)
		}
	}
	return names, nil
}

func (s *dirStore) list() ([]*record, error) {
	names, err := s.names()
	if err != nil {
		return nil, err
	}
	out := make([]*record, 0, len(names))
	for _, n := range names {
		r, err := s.get(n)
		if errors.Is(err, errNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (s *dirStore) heartbeat(name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, "heartbeat", name))
	if errors.Is(err, os.ErrNotExist) {
		return heartbeatUnset, nil
	}
	if err != nil {
		return "", fmt.Errorf("local: read heartbeat switch of %s: %w", name, err)
	}
	return parseHeartbeat(b), nil
}

func (s *dirStore) setHeartbeat(name, state string) error {
	path := filepath.Join(s.dir, "heartbeat", name)
	if state == heartbeatUnset {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return s.writeAtomic(path, []byte(state+"\n"), false)
}

func (s *dirStore) heartbeats() (map[string]string, error) {
	dir := filepath.Join(s.dir, "heartbeat")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("local: read heartbeat switches: %w", err)
	}
	out := make(map[string]string, len(entries))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // removed meanwhile
		}
		out[e.Name()] = parseHeartbeat(b)
	}
	return out, nil
}

func parseHeartbeat(b []byte) string {
	if strings.TrimSpace(string(b)) == heartbeatRunning {
		return heartbeatRunning
	}
	return heartbeatStopped // any other content (e.g. an empty file from `touch`) stops it
}

func (s *dirStore) putTarget(kubeconfig []byte) (string, error) {
	id := targetID(kubeconfig)
	path := filepath.Join(s.dir, "targets", id+".kubeconfig")
	if _, err := os.Stat(path); err == nil {
		return id, nil
	}
	if err := s.writeAtomic(path, kubeconfig, false); err != nil {
		return "", fmt.Errorf("local: keep target kubeconfig: %w", err)
	}
	return id, nil
}

func (s *dirStore) target(id string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, "targets", id+".kubeconfig"))
	if err != nil {
		return nil, fmt.Errorf("local: target kubeconfig %s: %w", id, err)
	}
	return b, nil
}

// writeAtomic writes data to path through a synced temporary file, so the file is either
// absent, the old version or the new version. With exclusive it fails with errExists instead of
// replacing an existing file. The temporary file is made in tmp/ (same file system), not next to
// path: creating and removing it in machines/, a directory of thousands of entries written by
// many creations at once, made every creation wait for that directory's lock (at 5000 machines a
// creation's file operations cost several times their CPU at 1000).
func (s *dirStore) writeAtomic(path string, data []byte, exclusive bool) error {
	tmp, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err = tmp.Write(data); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if exclusive {
		if err := os.Link(tmp.Name(), path); err != nil {
			if errors.Is(err, os.ErrExist) {
				return errExists
			}
			return err
		}
		return nil
	}
	return os.Rename(tmp.Name(), path)
}

// memStore keeps everything in memory, for a driver without a state dir.
type memStore struct {
	mu       sync.Mutex
	records  map[string]record
	beats    map[string]string
	off      map[string]bool
	targets  map[string][]byte
	cidrs    map[int]string
	nextCIDR int
}

func newMemStore() *memStore {
	return &memStore{records: map[string]record{}, beats: map[string]string{}, off: map[string]bool{}, targets: map[string][]byte{}, cidrs: map[int]string{}}
}

func (s *memStore) update(r *record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records[r.Name] = *r
	return nil
}

func (s *memStore) claimPodCIDR(machine string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range podCIDRs {
		index := (s.nextCIDR + i) % podCIDRs
		if _, taken := s.cidrs[index]; !taken {
			s.cidrs[index] = machine
			s.nextCIDR = (index + 1) % podCIDRs
			return index, nil
		}
	}
	return 0, errNoPodCIDR
}

func (s *memStore) releasePodCIDR(index int, machine string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cidrs[index] == machine {
		delete(s.cidrs, index)
	}
	return nil
}

func (s *memStore) get(name string) (*record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.records[name]
	if !ok {
		return nil, errNotFound
	}
	return &r, nil
}

func (s *memStore) create(r *record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.records[r.Name]; ok {
		return errExists
	}
	s.records[r.Name] = *r
	return nil
}

func (s *memStore) remove(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.records, name)
	delete(s.beats, name)
	delete(s.off, name)
	return nil
}

func (s *memStore) setStopped(name string, stopped bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if stopped {
		s.off[name] = true
	} else {
		delete(s.off, name)
	}
	return nil
}

func (s *memStore) stopped() (map[string]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.off), nil
}

func (s *memStore) names() ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.records))
	for n := range s.records {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

func (s *memStore) list() ([]*record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*record, 0, len(s.records))
	for _, r := range s.records {
		out = append(out, &r)
	}
	return out, nil
}

func (s *memStore) heartbeat(name string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.beats[name], nil
}

func (s *memStore) setHeartbeat(name, state string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if state == heartbeatUnset {
		delete(s.beats, name)
	} else {
		s.beats[name] = state
	}
	return nil
}

func (s *memStore) heartbeats() (map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.beats))
	for k, v := range s.beats {
		out[k] = v
	}
	return out, nil
}

func (s *memStore) putTarget(kubeconfig []byte) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := targetID(kubeconfig)
	s.targets[id] = kubeconfig
	return id, nil
}

func (s *memStore) target(id string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.targets[id]
	if !ok {
		return nil, fmt.Errorf("local: target kubeconfig %s: %w", id, errNotFound)
	}
	return b, nil
}

var (
	_ store = (*dirStore)(nil)
	_ store = (*memStore)(nil)
)
