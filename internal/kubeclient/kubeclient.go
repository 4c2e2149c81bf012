// Package kubeclient is a typed Kubernetes client for the few core/v1 and coordination/v1
// resources a provider manages on a target cluster (nodes, pods, leases). Its calls have the
// shape and semantics of client-go's generated clientset (c.CoreV1().Nodes().Get(ctx, name,
// opts), same errors), but it links only client-go's REST client and a scheme of core/v1 and
// coordination/v1.
//
// Why not the clientset: k8s.io/client-go/kubernetes, and every typed package under it, imports
// k8s.io/client-go/kubernetes/scheme, which registers every built-in API group, plus the apply
// configurations of every type. That is about 20 MB of a stripped binary, more than the whole
// rest of a slim provider binary (`make check-slim` keeps it out of those builds; see
// docs/performance.md for the measurement).
package kubeclient

import (
	"context"
	"fmt"
	"net/http"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
)

var (
	scheme         = runtime.NewScheme()
	codecs         = serializer.NewCodecFactory(scheme)
	parameterCodec = runtime.NewParameterCodec(scheme)
)

func init() {
	// As client-go's scheme: list and get options are also known unversioned.
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	utilruntime.Must(corev1.AddToScheme(scheme))
	utilruntime.Must(coordinationv1.AddToScheme(scheme))
}

// Clientset reaches the resources of one cluster.
type Clientset struct {
	core         *CoreV1
	coordination *CoordinationV1
}

// NewForConfig returns a client for cfg. Like client-go's clientset, both API groups share one
// HTTP client and one rate limiter built from cfg.QPS and cfg.Burst.
func NewForConfig(cfg *rest.Config) (*Clientset, error) {
	c := *cfg
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if c.RateLimiter == nil && c.QPS > 0 {
		if c.Burst <= 0 {
			return nil, fmt.Errorf("kubeclient: burst must be positive when QPS is (QPS %v, burst %d)", c.QPS, c.Burst)
		}
		c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	}
	httpClient, err := rest.HTTPClientFor(&c)
	if err != nil {
		return nil, fmt.Errorf("kubeclient: %w", err)
	}
	core, err := restClient(c, httpClient, "/api", corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	coordination, err := restClient(c, httpClient, "/apis", coordinationv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return &Clientset{core: &CoreV1{core}, coordination: &CoordinationV1{coordination}}, nil
}

func restClient(c rest.Config, httpClient *http.Client, apiPath string, gv schema.GroupVersion) (rest.Interface, error) {
	c.APIPath = apiPath
	c.GroupVersion = &gv
	c.NegotiatedSerializer = codecs.WithoutConversion()
	rc, err := rest.RESTClientForConfigAndClient(&c, httpClient)
	if err != nil {
		return nil, fmt.Errorf("kubeclient: %s client: %w", gv, err)
	}
	return rc, nil
}

// CoreV1 returns the core/v1 client.
func (c *Clientset) CoreV1() *CoreV1 { return c.core }

// CoordinationV1 returns the coordination.k8s.io/v1 client.
func (c *Clientset) CoordinationV1() *CoordinationV1 { return c.coordination }

// CoreV1 reaches core/v1 resources.
type CoreV1 struct{ rc rest.Interface }

// Nodes returns the client of Nodes (cluster-scoped).
func (c *CoreV1) Nodes() *Resource[*corev1.Node, *corev1.NodeList] {
	return newResource[corev1.Node, corev1.NodeList](c.rc, "nodes", "")
}

// Pods returns the client of the Pods of namespace.
func (c *CoreV1) Pods(namespace string) *Resource[*corev1.Pod, *corev1.PodList] {
	return newResource[corev1.Pod, corev1.PodList](c.rc, "pods", namespace)
}

// CoordinationV1 reaches coordination.k8s.io/v1 resources.
type CoordinationV1 struct{ rc rest.Interface }

// Leases returns the client of the Leases of namespace.
func (c *CoordinationV1) Leases(namespace string) *Resource[*coordinationv1.Lease, *coordinationv1.LeaseList] {
	return newResource[coordinationv1.Lease, coordinationv1.LeaseList](c.rc, "leases", namespace)
}

// Resource is the client of one resource (in one namespace, for namespaced resources). Its
// methods are those of client-go's generated typed clients.
type Resource[T, L runtime.Object] struct {
	rc        rest.Interface
	resource  string
	namespace string
	newObj    func() T
	newList   func() L
}

// newResource builds the client of resource; O and OL are the object and list types (T = *O).
func newResource[O, OL any, T interface {
	*O
	runtime.Object
}, L interface {
	*OL
	runtime.Object
}](rc rest.Interface, resource, namespace string) *Resource[T, L] {
	return &Resource[T, L]{
		rc: rc, resource: resource, namespace: namespace,
		newObj:  func() T { return T(new(O)) },
		newList: func() L { return L(new(OL)) },
	}
}

// on scopes req to this resource (and namespace).
func (r *Resource[T, L]) on(req *rest.Request) *rest.Request {
	return req.NamespaceIfScoped(r.namespace, r.namespace != "").Resource(r.resource)
}

// Get returns the object called name.
func (r *Resource[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	out := r.newObj()
	err := r.on(r.rc.Get()).Name(name).VersionedParams(&opts, parameterCodec).Do(ctx).Into(out)
	return out, err
}

// List returns the objects that opts selects.
func (r *Resource[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	out := r.newList()
	err := r.on(r.rc.Get()).VersionedParams(&opts, parameterCodec).Do(ctx).Into(out)
	return out, err
}

// Watch watches the objects that opts selects.
func (r *Resource[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return r.on(r.rc.Get()).VersionedParams(&opts, parameterCodec).Watch(ctx)
}

// ListWatch lists and watches, for an informer, the objects that tweak selects (a label or
// field selector set on every request).
func (r *Resource[T, L]) ListWatch(tweak func(*metav1.ListOptions)) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			return r.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			return r.Watch(ctx, o)
		},
	}
}

// Create creates obj and returns it as stored.
func (r *Resource[T, L]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	out := r.newObj()
	err := r.on(r.rc.Post()).VersionedParams(&opts, parameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}

// Update replaces obj (its spec and metadata; the API server ignores status changes).
func (r *Resource[T, L]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	return r.put(ctx, obj, "", opts)
}

// UpdateStatus replaces the status of obj.
func (r *Resource[T, L]) UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	return r.put(ctx, obj, "status", opts)
}

func (r *Resource[T, L]) put(ctx context.Context, obj T, subresource string, opts metav1.UpdateOptions) (T, error) {
	accessor, ok := any(obj).(metav1.Object)
	if !ok {
		return obj, fmt.Errorf("kubeclient: update %s: %T has no object metadata", r.resource, obj)
	}
	req := r.on(r.rc.Put()).Name(accessor.GetName())
	if subresource != "" {
		req = req.SubResource(subresource)
	}
	out := r.newObj()
	err := req.VersionedParams(&opts, parameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}

// Delete deletes the object called name.
func (r *Resource[T, L]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return r.on(r.rc.Delete()).Name(name).Body(&opts).Do(ctx).Error()
}

// Patch applies a patch of type pt to the object called name (or to its subresources).
func (r *Resource[T, L]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	out := r.newObj()
	err := r.on(r.rc.Patch(pt)).Name(name).SubResource(subresources...).
		VersionedParams(&opts, parameterCodec).Body(data).Do(ctx).Into(out)
	return out, err
}
