// Package restmemo keeps the REST mappings a controller process has resolved. controller-runtime
// asks its mapper whether an object is namespaced on every read of a namespace-restricted cache
// (apiutil.IsObjectNamespaced, for each Get and List), and its dynamic mapper answers by walking a
// mapper per API group under a lock: 8 % of the controller's CPU samples in a scale-up of 500
// deployments (docs/performance.md). A kind's mapping does not change while it is served — a
// CRD's scope is immutable and its resource name is fixed by the CRD's name — so the first
// answer is kept. Failures are not kept: a kind that is not served yet (a CRD installed later)
// is looked up again.
package restmemo

import (
	"net/http"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Mapper is a meta.RESTMapper that remembers the RESTMapping answers the mapper it wraps gave
// for one kind at one version; every other call goes to that mapper (a call without a version
// takes the group's preferred version, which may change).
type Mapper struct {
	meta.RESTMapper
	mappings sync.Map // key → *meta.RESTMapping
}

var _ meta.RESTMapper = (*Mapper)(nil)

type key struct {
	gk      schema.GroupKind
	version string
}

// New wraps m.
func New(m meta.RESTMapper) *Mapper { return &Mapper{RESTMapper: m} }

// Provider is a controller-runtime MapperProvider: its dynamic mapper, remembered.
func Provider(cfg *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
	m, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	return New(m), nil
}

// RESTMapping answers from memory for a kind and version asked before; the caller gets its own
// copy, as from the wrapped mapper.
func (m *Mapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if len(versions) != 1 {
		return m.RESTMapper.RESTMapping(gk, versions...)
	}
	k := key{gk: gk, version: versions[0]}
	if v, ok := m.mappings.Load(k); ok {
		mapping := *v.(*meta.RESTMapping)
		return &mapping, nil
	}
	mapping, err := m.RESTMapper.RESTMapping(gk, versions...)
	if err != nil {
		return nil, err
	}
	kept := *mapping
	m.mappings.Store(k, &kept)
	return mapping, nil
}
