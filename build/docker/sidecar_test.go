package docker

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/gardenerseed"
)

// runGardenerSidecar runs the provider image as a Gardener seed runs the provider sidecar of
// MCM's pod: no command (the image's entrypoint, /machine-controller), the arguments of
// gardener/gardener's ProviderSidecarContainer (internal/gardenerseed), the pod's service
// account mounted at /var/run/secrets/kubernetes.io/serviceaccount with KUBERNETES_SERVICE_HOST
// and _PORT naming the API server (so --control-kubeconfig=inClusterConfig goes through
// rest.InClusterConfig), and Gardener's generic kubeconfig mounted at its path. Only --port is
// a free one: the container shares this machine's network to reach the test's API server. The
// provider half takes Lease machine-controller, answers /healthz, and a standalone Machine of
// the local provider becomes Running with its Node and is deleted with it.
func runGardenerSidecar(t *testing.T, p *podman, image string) {
	t.Helper()
	env := testenv.Start(t)
	c := env.Client()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	const ns = "shoot--local--image"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	token := func(name string) string {
		t.Helper()
		if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: ns + ":" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
		}); err != nil {
			t.Fatal(err)
		}
		tr, err := env.Clientset().CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	// The container's user, 65532, reads the mounts.
	podDir := func() string {
		t.Helper()
		dir, err := os.MkdirTemp("", "machinist-pod")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	serviceAccount := podDir()
	write(t, filepath.Join(serviceAccount, "token"), token("machine-controller-manager"))
	write(t, filepath.Join(serviceAccount, "ca.crt"), string(env.Config.CAData))
	write(t, filepath.Join(serviceAccount, "namespace"), ns)
	generic := podDir()
	if err := gardenerseed.WriteGenericKubeconfig(generic, env.Config.Host, env.Config.CAData, token("shoot-access"), gardenerseed.ShootToken); err != nil {
		t.Fatal(err)
	}
	server, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}

	port := freePort(t)
	args := slices.Clone(gardenerseed.ProviderSidecarArgs(ns))
	for i, a := range args {
		if strings.HasPrefix(a, "--port=") {
			args[i] = "--port=" + strconv.Itoa(port)
		}
	}
	p.must(time.Minute, append([]string{"run", "--detach", "--name", "sidecar", "--network", "host",
		"--volume", serviceAccount + ":/var/run/secrets/kubernetes.io/serviceaccount:ro",
		"--volume", generic + ":" + gardenerseed.GenericKubeconfigDir + ":ro",
		"--env", "KUBERNETES_SERVICE_HOST=" + server.Hostname(), "--env", "KUBERNETES_SERVICE_PORT=" + server.Port(),
		image}, args...)...)
	logs := func() string {
		out, _ := p.run(time.Minute, "logs", "sidecar")
		return out
	}
	poll := func(what string, cond func() (bool, string)) {
		t.Helper()
		var last string
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
			var ok bool
			ok, last = cond()
			return ok, nil
		}); err != nil {
			t.Fatalf("%s: %v (last: %s); the container's log:\n%s", what, err, last, logs())
		}
	}

	poll("the provider half answering /healthz and holding Lease machine-controller", func() (bool, string) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
		if err != nil {
			return false, err.Error()
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Sprintf("/healthz: %d %s", resp.StatusCode, body)
		}
		var lease coordinationv1.Lease
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "machine-controller"}, &lease); err != nil {
			return false, err.Error()
		}
		return ptr.Deref(lease.Spec.HolderIdentity, "") != "", "no holder"
	})

	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "local"},
		StringData: map[string]string{"userData": "#cloud-config\n"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Namespace: ns, Name: "local"},
		Provider:     "local",
		ProviderSpec: runtime.RawExtension{Raw: []byte(`{"cluster":"image"}`)},
		SecretRef:    &corev1.SecretReference{Namespace: ns, Name: "local"},
	}); err != nil {
		t.Fatal(err)
	}
	machine := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sidecar-1"},
		Spec: v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: "local"}}}
	if err := c.Create(ctx, machine); err != nil {
		t.Fatal(err)
	}
	poll("machine sidecar-1 Running with its Node", func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(machine), machine); err != nil {
			return false, err.Error()
		}
		if machine.Status.CurrentStatus.Phase != v1alpha1.MachineRunning {
			return false, "phase " + string(machine.Status.CurrentStatus.Phase)
		}
		var node corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: machine.Labels[v1alpha1.LabelNode]}, &node); err != nil {
			return false, fmt.Sprintf("node %q: %v", machine.Labels[v1alpha1.LabelNode], err)
		}
		return true, ""
	})
	node := machine.Labels[v1alpha1.LabelNode]
	if err := c.Delete(ctx, machine); err != nil {
		t.Fatal(err)
	}
	poll("machine sidecar-1 and its Node deleted", func() (bool, string) {
		errM := c.Get(ctx, client.ObjectKeyFromObject(machine), &v1alpha1.Machine{})
		errN := c.Get(ctx, client.ObjectKey{Name: node}, &corev1.Node{})
		return client.IgnoreNotFound(errM) == nil && errM != nil && client.IgnoreNotFound(errN) == nil && errN != nil,
			fmt.Sprintf("machine: %v, node: %v", errM, errN)
	})

	log := logs()
	if !strings.Contains(log, "starting machine-controller (the provider half)") {
		t.Errorf("the container's log does not say the provider half started:\n%s", log)
	}
	if strings.Contains(log, "ignoring flag") {
		t.Errorf("a flag of Gardener's sidecar is ignored:\n%s", log)
	}
	p.must(time.Minute, "stop", "--time", "10", "sidecar")
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
