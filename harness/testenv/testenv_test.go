package testenv_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/harness/localcontrolplane"
	"github.com/machinist-io/machinist/harness/testenv"
)

// One control plane serves every check below: starting one costs seconds on a busy machine.
func TestControlPlane(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("version", func(t *testing.T) {
		v, err := env.Clientset().Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != "v1.36.3" {
			t.Fatalf("/version reports %q, want v1.36.3 (the pin of build/tools)", v.GitVersion)
		}
	})

	t.Run("crds established", func(t *testing.T) {
		for _, name := range []string{"machines", "machineclasses", "machinesets", "machinedeployments"} {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := env.Client().Get(ctx, client.ObjectKey{Name: name + ".machine.sapcloud.io"}, &crd); err != nil {
				t.Fatalf("CRD %s: %v", name, err)
			}
			ok := false
			for _, c := range crd.Status.Conditions {
				ok = ok || (c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue)
			}
			if !ok {
				t.Fatalf("CRD %s is not Established: %+v", name, crd.Status.Conditions)
			}
		}
		// The typed client works right away.
		m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m1", Namespace: "default"}}
		if err := env.Client().Create(ctx, m); err != nil {
			t.Fatalf("create machine: %v", err)
		}
	})

	t.Run("kubeconfig", func(t *testing.T) {
		if _, err := os.Stat(env.KubeconfigPath); err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", env.KubeconfigPath)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != env.Config.Host {
			t.Fatalf("kubeconfig server %q, want %q", cfg.Host, env.Config.Host)
		}
		if env.Config.QPS < 500 || env.Config.Burst < 1000 {
			t.Fatalf("QPS/burst %v/%d not raised", env.Config.QPS, env.Config.Burst)
		}
	})

	t.Run("kube-node-lease exists", func(t *testing.T) {
		// The API server creates it itself; the local provider's agents renew leases there.
		deadline := time.Now().Add(time.Minute)
		for {
			var ns corev1.Namespace
			err := env.Client().Get(ctx, client.ObjectKey{Name: corev1.NamespaceNodeLease}, &ns)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("namespace %s: %v", corev1.NamespaceNodeLease, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("stop and start the API server", func(t *testing.T) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "survives", Namespace: "default"}, Data: map[string]string{"k": "v"}}
		if err := env.Client().Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		env.StopAPIServer()
		if _, err := env.Clientset().Discovery().ServerVersion(); err == nil {
			t.Fatal("the API server still answers after StopAPIServer")
		}
		env.StartAPIServer()
		var got corev1.ConfigMap
		if err := env.Client().Get(ctx, client.ObjectKeyFromObject(cm), &got); err != nil {
			t.Fatalf("after restart: %v", err)
		}
		if got.Data["k"] != "v" {
			t.Fatalf("after restart the data is %v", got.Data)
		}
	})
}

func TestMissingBinariesSayMakeTools(t *testing.T) {
	_, err := localcontrolplane.Start(context.Background(), localcontrolplane.Options{BinDir: t.TempDir()})
	if err == nil {
		t.Fatal("started without binaries")
	}
	if want := "make tools"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
}

// TestPersistentDir is what `make run` relies on: a control plane restarted on the same Dir keeps
// its data, certificates (the kubeconfig stays valid) and, when free, its port.
func TestPersistentDir(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	first, err := localcontrolplane.Start(ctx, localcontrolplane.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(first.Config, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: "default"}}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := os.ReadFile(first.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("Stop removed a caller's Dir: %v", err)
	}

	second, err := localcontrolplane.Start(ctx, localcontrolplane.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := second.Stop(); err != nil {
			t.Error(err)
		}
	}()
	if second.APIServerPort != first.APIServerPort {
		t.Logf("port changed from %d to %d (it was taken meanwhile)", first.APIServerPort, second.APIServerPort)
	}
	// The old kubeconfig's credentials still work (same CA and admin certificate).
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host = second.Config.Host
	c2, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}); err != nil {
		t.Fatalf("data or credentials lost across restart: %v", err)
	}
}

// TestFullControlPlane: with kube-scheduler and kube-controller-manager, a Deployment gets its
// ReplicaSet and pod from the controller manager (whose service-account controller made the
// default service account the admission plugin requires), and the scheduler reports the pod
// unschedulable on a cluster without nodes.
func TestFullControlPlane(t *testing.T) {
	env := testenv.Start(t, testenv.WithFullControlPlane())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := env.Clientset()
	labels := map[string]string{"app": "probe"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var state string
	for {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=probe"})
		if err != nil {
			t.Fatal(err)
		}
		state = fmt.Sprintf("%d pods", len(pods.Items))
		if len(pods.Items) == 1 {
			p := pods.Items[0]
			if p.Spec.ServiceAccountName != "default" {
				t.Fatalf("pod has service account %q, want default (admission plugin on)", p.Spec.ServiceAccountName)
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled {
					state = fmt.Sprintf("PodScheduled=%s reason=%s", c.Status, c.Reason)
					if c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
						return
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no unschedulable pod of the Deployment: %s", state)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
