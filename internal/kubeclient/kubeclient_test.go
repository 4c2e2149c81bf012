package kubeclient_test

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/kubeclient"
)

// TestAgainstAPIServer drives every call of each resource against a real kube-apiserver and
// checks the result with client-go's own clientset, so both agree on the wire.
func TestAgainstAPIServer(t *testing.T) {
	env := testenv.Start(t)
	cs, err := kubeclient.NewForConfig(rest.CopyConfig(env.Config))
	if err != nil {
		t.Fatal(err)
	}
	ref := env.Clientset()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	t.Run("nodes", func(t *testing.T) {
		nodes := cs.CoreV1().Nodes()
		w, err := nodes.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=kc-1"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		created, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kc-1", Labels: map[string]string{"a": "1"}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if created.UID == "" || created.Name != "kc-1" {
			t.Fatalf("create returned %+v", created.ObjectMeta)
		}
		select {
		case ev := <-w.ResultChan():
			if n, ok := ev.Object.(*corev1.Node); ev.Type != watch.Added || !ok || n.Name != "kc-1" {
				t.Fatalf("watch event %v %T", ev.Type, ev.Object)
			}
		case <-ctx.Done():
			t.Fatal("no watch event")
		}
		if _, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kc-1"}}, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
			t.Fatalf("second create: %v, want AlreadyExists", err)
		}

		created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
		if _, err := nodes.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := nodes.Get(ctx, "kc-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got.Spec.Unschedulable = true
		if _, err := nodes.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := nodes.Patch(ctx, "kc-1", types.MergePatchType, []byte(`{"metadata":{"labels":{"b":"2"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		seen, err := ref.CoreV1().Nodes().Get(ctx, "kc-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !seen.Spec.Unschedulable || seen.Labels["b"] != "2" || len(seen.Status.Conditions) != 1 || seen.Status.Conditions[0].Reason != "KubeletReady" {
			t.Errorf("clientset sees spec %+v, labels %v, conditions %+v", seen.Spec, seen.Labels, seen.Status.Conditions)
		}
		// A stale resourceVersion conflicts, as with client-go (retry.RetryOnConflict relies on it).
		if _, err := nodes.Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			t.Errorf("stale update: %v, want Conflict", err)
		}
		list, err := nodes.List(ctx, metav1.ListOptions{LabelSelector: "a=1"})
		if err != nil || len(list.Items) != 1 {
			t.Fatalf("list: %v, %d items", err, len(list.Items))
		}
		if err := nodes.Delete(ctx, "kc-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := nodes.Get(ctx, "kc-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("get after delete: %v, want NotFound", err)
		}
		if err := nodes.Delete(ctx, "kc-1", metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("second delete: %v, want NotFound", err)
		}
	})

	t.Run("leases", func(t *testing.T) {
		leases := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kc-1"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("kc-1")}}
		if _, err := leases.Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		seen, err := ref.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "kc-1", metav1.GetOptions{})
		if err != nil || ptr.Deref(seen.Spec.HolderIdentity, "") != "kc-1" {
			t.Fatalf("clientset sees %v, %+v", err, seen)
		}
		// Another namespace holds no such lease.
		if _, err := cs.CoordinationV1().Leases("default").Get(ctx, "kc-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("lease in default: %v, want NotFound", err)
		}
		if err := leases.Delete(ctx, "kc-1", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("pods", func(t *testing.T) {
		pods := cs.CoreV1().Pods("default")
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kc-pod"}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}},
		}}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		list, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 || list.Items[0].Name != "kc-pod" {
			t.Fatalf("list: %v, %+v", err, list)
		}
		// An invalid object is refused with the API server's field error.
		_, err = pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bad"}}, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.containers") {
			t.Fatalf("invalid pod: %v", err)
		}
	})
}

func TestNewForConfigRefusesQPSWithoutBurst(t *testing.T) {
	_, err := kubeclient.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1", QPS: 5})
	if err == nil || !strings.Contains(err.Error(), "burst") {
		t.Fatalf("err = %v, want one naming burst", err)
	}
}
