package ownership

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// IndexController is the cache index of objects by the UID of their controller. A controller
// reads its own objects through it instead of listing its namespace: with hundreds of
// MachineDeployments of a few machines each, a namespace list per reconcile is most of the
// controllers' CPU.
const IndexController = "machinist.io/ownership.controller"

// noController is the index value of objects without a controller (the orphans a controller may
// adopt).
const noController = "-"

// indexed remembers the (indexer, type) pairs already registered: the MachineSet, MachineDeployment
// and safety controllers share the index of a type when they run in one manager, and a cache
// refuses a second registration of a name.
var indexed sync.Map

// AddIndex registers IndexController for obj's type with the indexer (the manager's), once.
func AddIndex(ctx context.Context, indexer client.FieldIndexer, obj client.Object) error {
	key := struct {
		indexer client.FieldIndexer
		typ     reflect.Type
	}{indexer, reflect.TypeOf(obj)}
	once, _ := indexed.LoadOrStore(key, &sync.Once{})
	var err error
	once.(*sync.Once).Do(func() {
		err = indexer.IndexField(ctx, obj, IndexController, func(o client.Object) []string {
			if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
				return []string{string(ref.UID)}
			}
			return []string{noController}
		})
	})
	if err != nil {
		indexed.Delete(key) // let a retry register it
		return fmt.Errorf("index %T by controller: %w", obj, err)
	}
	return nil
}

// Controlled lists into list the objects of namespace controlled by uid, from a cache with
// IndexController; opts add to the list options (client.UnsafeDisableDeepCopy for reads only).
func Controlled(ctx context.Context, c client.Reader, list client.ObjectList, namespace string, uid types.UID, opts ...client.ListOption) error {
	return c.List(ctx, list, append([]client.ListOption{client.InNamespace(namespace), client.MatchingFields{IndexController: string(uid)}}, opts...)...)
}

// Orphans lists into list the objects of namespace without a controller.
func Orphans(ctx context.Context, c client.Reader, list client.ObjectList, namespace string, opts ...client.ListOption) error {
	return c.List(ctx, list, append([]client.ListOption{client.InNamespace(namespace), client.MatchingFields{IndexController: noController}}, opts...)...)
}
