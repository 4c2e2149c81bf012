package machine

import (
	"context"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// ownWrites remembers, per machine, the resourceVersions that this controller's own writes
// replaced. The cache shows a machine's versions in order, so a machine it shows at one of them
// has not caught up with a write of ours: acting on it would repeat that write (which conflicts
// at best, and at worst undoes a newer phase). The node's events and our own writes wake a
// machine again while its reconcile writes, so this happens to most new machines once.
type ownWrites struct {
	mu         sync.Mutex
	superseded map[string]map[string]struct{} // machine key → replaced resourceVersions
}

func newOwnWrites() *ownWrites {
	return &ownWrites{superseded: map[string]map[string]struct{}{}}
}

func (w *ownWrites) record(key, replaced string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.superseded[key]
	if s == nil {
		s = map[string]struct{}{}
		w.superseded[key] = s
	}
	s[replaced] = struct{}{}
}

// outdated reports whether the machine key read at resourceVersion rv is older than a write of
// ours. A read at any other version has caught up with all of them, so they are forgotten.
func (w *ownWrites) outdated(key, rv string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, old := w.superseded[key][rv]; old {
		return true
	}
	delete(w.superseded, key)
	return false
}

func (w *ownWrites) forget(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.superseded, key)
}

// trackingClient is the manager's client recording in writes the versions its successful
// machine writes replace.
type trackingClient struct {
	client.Client
	writes *ownWrites
}

func (c trackingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	before := obj.GetResourceVersion()
	err := c.Client.Update(ctx, obj, opts...)
	c.note(obj, before, err)
	return err
}

func (c trackingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	before := obj.GetResourceVersion()
	err := c.Client.Patch(ctx, obj, patch, opts...)
	c.note(obj, before, err)
	return err
}

func (c trackingClient) Status() client.SubResourceWriter {
	return trackingStatus{SubResourceWriter: c.Client.Status(), c: c}
}

func (c trackingClient) note(obj client.Object, before string, err error) {
	if _, isMachine := obj.(*v1alpha1.Machine); !isMachine || err != nil || before == "" {
		return
	}
	if obj.GetResourceVersion() != before {
		c.writes.record(obj.GetNamespace()+"/"+obj.GetName(), before)
	}
}

type trackingStatus struct {
	client.SubResourceWriter
	c trackingClient
}

func (s trackingStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	before := obj.GetResourceVersion()
	err := s.SubResourceWriter.Update(ctx, obj, opts...)
	s.c.note(obj, before, err)
	return err
}

func (s trackingStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	before := obj.GetResourceVersion()
	err := s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
	s.c.note(obj, before, err)
	return err
}

var (
	_ client.Client            = trackingClient{}
	_ client.SubResourceWriter = trackingStatus{}
)
