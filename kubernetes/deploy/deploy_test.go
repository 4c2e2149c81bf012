// Package deploy holds no code: its tests prove the kustomize bases under kubernetes/deploy apply
// to a real kube-apiserver with the pinned kubectl, and that the all-in-one RBAC is all the
// controller needs.
package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/harness/localcontrolplane"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/eventually"
	"github.com/machinist-io/machinist/internal/syncbuf"
	_ "github.com/machinist-io/machinist/providers/local"
)

// kubectlPath finds the pinned kubectl (`make kubectl`): in $KUBEBUILDER_ASSETS, else bin/.
func kubectlPath(t *testing.T) string {
	t.Helper()
	var dirs []string
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		dirs = append(dirs, d)
	}
	if root, err := localcontrolplane.RepoRoot(); err == nil {
		dirs = append(dirs, filepath.Join(root, "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "kubectl")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	t.Fatalf("kubectl not found in %v: run `make kubectl` (it builds the pinned kubectl into bin/)", dirs)
	return ""
}

func kubectl(t *testing.T, env *testenv.Env, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectlPath(t), append([]string{"--kubeconfig", env.KubeconfigPath}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func here(t *testing.T, rel string) string {
	t.Helper()
	root, err := localcontrolplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "kubernetes", "deploy", rel)
}

// bases are the kustomizations of this directory that stand on their own (the autoscaler's needs
// cert-manager and has its own test).
var bases = []string{"all-in-one", "local", "provider-sidecar", "provider-dialin"}

// TestServerSideDryRun runs `kubectl apply --dry-run=server -k` for every base: the API server
// validates every object (schemas, RBAC references, field values) and stores nothing.
func TestServerSideDryRun(t *testing.T) {
	env := testenv.Start(t)
	// A server-side dry run creates no namespace, so objects in a new namespace would be refused;
	// kubectl users apply twice or create the namespace first, as here.
	if err := env.Client().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "machinist-system"}}); err != nil {
		t.Fatal(err)
	}
	for _, base := range bases {
		t.Run(base, func(t *testing.T) {
			out, err := kubectl(t, env, "apply", "--dry-run=server", "-k", here(t, base))
			if err != nil {
				t.Fatalf("kubectl apply --dry-run=server -k %s: %v\n%s", base, err, out)
			}
			wants := []string{"deployment.apps/machinist", "clusterrole.rbac.authorization.k8s.io/machinist", "service/machinist-metrics", "(server dry run)"}
			if base == "provider-dialin" {
				wants = append(wants, "deployment.apps/machinist-openstack", "service/machinist-dialin")
			}
			for _, want := range wants {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			err = env.Client().Get(context.Background(), client.ObjectKey{Namespace: "machinist-system", Name: "machinist"}, &corev1.ServiceAccount{})
			if !apierrors.IsNotFound(err) {
				t.Errorf("a dry run created the ServiceAccount (get: %v)", err)
			}
		})
	}
}

// TestRBACIsEnough applies kubernetes/deploy/local for real, then runs the controller manager as
// its ServiceAccount (impersonated) with the local provider: a MachineDeployment reaches Running
// and is deleted again, so every request the controllers and the local node agents make is
// allowed by the manifests' RBAC.
func TestRBACIsEnough(t *testing.T) {
	env := testenv.Start(t)
	if out, err := kubectl(t, env, "apply", "-k", here(t, "local")); err != nil {
		t.Fatalf("kubectl apply -k local: %v\n%s", err, out)
	}
	const ns = "machinist-system"
	admin := env.Client()
	ctx := context.Background()

	sa := rest.CopyConfig(env.Config)
	sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":machinist"}
	// Nothing but the manifests' RBAC grants the ServiceAccount anything: prove it is not admin.
	saClient, err := client.New(sa, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := saClient.List(ctx, &corev1.SecretList{}, client.InNamespace("default")); !apierrors.IsForbidden(err) {
		t.Fatalf("the ServiceAccount may list secrets in default (err %v): the test would prove nothing", err)
	}

	logs := &syncbuf.Buffer{}
	opts := ctrltest.ProductOptions(t, sa, ns)
	opts.LeaderElection.Enabled = true // the manifests' RBAC must allow the Lease too
	opts.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctrltest.RunProduct(t, opts)
	defer func() {
		if t.Failed() {
			t.Logf("controller log:\n%s", tail(logs.String(), 40000))
		}
	}()

	mustCreate := func(obj client.Object) {
		t.Helper()
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	mustCreate(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "local"}, StringData: map[string]string{"userData": "#cloud-config\n# <<MACHINE_NAME>> <<BOOTSTRAP_TOKEN>>\n"}})
	mustCreate(&v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Namespace: ns, Name: "local"},
		Provider:     "local",
		ProviderSpec: runtime.RawExtension{Raw: []byte(`{"cluster":"rbac"}`)},
		SecretRef:    &corev1.SecretReference{Namespace: ns, Name: "local"},
	})
	one := intstr.FromInt(1)
	mustCreate(&v1alpha1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pool"},
		Spec: v1alpha1.MachineDeploymentSpec{
			Replicas: 2,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "p"}},
			Strategy: v1alpha1.MachineDeploymentStrategy{RollingUpdate: &v1alpha1.RollingUpdateMachineDeployment{UpdateConfiguration: v1alpha1.UpdateConfiguration{MaxSurge: &one}}},
			Template: v1alpha1.MachineTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"pool": "p"}},
				Spec:       v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: "local"}},
			},
		},
	})
	eventually.Explained(t, 120*time.Second, "2 Running machines", func() (bool, string) {
		var list v1alpha1.MachineList
		if err := admin.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		running := 0
		var phases []string
		for _, m := range list.Items {
			phases = append(phases, string(m.Status.CurrentStatus.Phase)+":"+m.Status.LastOperation.Description)
			if m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning {
				running++
			}
		}
		return running == 2 && len(list.Items) == 2, strings.Join(phases, "; ")
	})
	// The node agents run the pods bound to their nodes (watch, status, removal).
	var machines v1alpha1.MachineList
	if err := admin.List(ctx, &machines, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bound"},
		Spec: corev1.PodSpec{NodeName: machines.Items[0].Labels[v1alpha1.LabelNode], TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	mustCreate(pod)
	eventually.Explained(t, 60*time.Second, "the bound pod Running", func() (bool, string) {
		err := admin.Get(ctx, client.ObjectKeyFromObject(pod), pod)
		return err == nil && pod.Status.Phase == corev1.PodRunning, fmt.Sprintf("phase %q %v", pod.Status.Phase, err)
	})
	if err := admin.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	eventually.Explained(t, 60*time.Second, "the deleted pod removed", func() (bool, string) {
		err := admin.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if err := admin.Delete(ctx, &v1alpha1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pool"}}); err != nil {
		t.Fatal(err)
	}
	eventually.Explained(t, 120*time.Second, "machines, nodes and the deployment gone", func() (bool, string) {
		var ms v1alpha1.MachineList
		var nodes corev1.NodeList
		_ = admin.List(ctx, &ms, client.InNamespace(ns))
		_ = admin.List(ctx, &nodes)
		err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pool"}, &v1alpha1.MachineDeployment{})
		return len(ms.Items) == 0 && len(nodes.Items) == 0 && apierrors.IsNotFound(err),
			fmt.Sprintf("%d machines, %d nodes, deployment: %v", len(ms.Items), len(nodes.Items), err)
	})
	if strings.Contains(logs.String(), "forbidden") {
		t.Errorf("the controllers were refused something:\n%s", grepLines(logs.String(), "forbidden"))
	}
}

// rendered are the kustomizations whose machinist containers the image and command line tests
// check: the bases and the autoscaler's.
var rendered = append(append([]string{}, bases...), "autoscaler")

// machinistContainer is a container of a rendered Deployment that runs a machinist image.
type machinistContainer struct {
	deployment, name string
	image, tag       string // machinist or machinist-<provider>, and its tag
	command, args    []string
}

// containers renders base with the pinned kubectl and returns its machinist containers.
func containers(t *testing.T, base string) []machinistContainer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, kubectlPath(t), "kustomize", here(t, base)).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", base, err)
	}
	var found []machinistContainer
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var d appsv1.Deployment
		if err := dec.Decode(&d); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		if d.Kind != "Deployment" {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			image, tag, _ := strings.Cut(c.Image, ":")
			if image != "machinist" && !strings.HasPrefix(image, "machinist-") {
				continue
			}
			found = append(found, machinistContainer{d.Name, c.Name, image, tag, c.Command, c.Args})
		}
	}
	if len(found) == 0 {
		t.Fatalf("%s: no machinist container found", base)
	}
	return found
}

// TestImagesFollowVERSION checks that every machinist image the kustomizations reference has the
// tag `make image` gives it: the Makefile's default VERSION.
func TestImagesFollowVERSION(t *testing.T) {
	root, err := localcontrolplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^VERSION\s*\?=\s*(\S+)\s*$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile has no `VERSION ?= <default>`")
	}
	version := string(m[1])
	for _, base := range rendered {
		for _, c := range containers(t, base) {
			if c.tag != version {
				t.Errorf("%s: %s/%s runs %s:%s; `make image` tags %s:%s (the Makefile's VERSION): set newTag: %s in %s/kustomization.yaml",
					base, c.deployment, c.name, c.image, c.tag, c.image, version, version, base)
			}
		}
	}
}

// TestContainerArgsParse runs each machinist container's command line (from every rendered
// kustomization) against the binary its image holds, with --help appended: the all-in-one for
// machinist, the provider image's build (-tags slim,machinecontroller,provider_<name>) for
// machinist-<name>, under the name the container runs it by: its command, else the image's
// entrypoint (/usr/local/bin/machinist in the all-in-one, /machine-controller, MCM's provider
// half, in a provider image; build/docker/image.sh). An unknown subcommand or flag, a global
// flag placed after the subcommand, a subcommand given to /machine-controller, or a controller
// subcommand a container should not run fails here instead of in a crash-looping pod.
func TestContainerArgsParse(t *testing.T) {
	root, err := localcontrolplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins := map[string]string{} // image -> directory of its binary
	binary := func(image, program string) string {
		t.Helper()
		dir, ok := bins[image]
		if !ok {
			dir = t.TempDir()
			args := []string{"build", "-o", filepath.Join(dir, "machinist")}
			if provider, ok := strings.CutPrefix(image, "machinist-"); ok {
				args = append(args, "-tags", "slim,machinecontroller,provider_"+provider)
			}
			build := exec.Command("go", append(args, "./cmd/machinist")...)
			build.Dir = root
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			bins[image] = dir
		}
		path := filepath.Join(dir, filepath.Base(program))
		if _, err := os.Stat(path); err != nil {
			if err := os.Link(filepath.Join(dir, "machinist"), path); err != nil {
				t.Fatal(err)
			}
		}
		return path
	}
	for _, base := range rendered {
		for _, c := range containers(t, base) {
			argv := slices.Clone(c.command)
			if len(argv) == 0 {
				argv = []string{"/usr/local/bin/machinist"}
				if c.image != "machinist" {
					argv = []string{"/machine-controller"}
				}
			}
			argv = append(append(argv, c.args...), "--help")
			// Build first: the minute is the command's, not the compile's (a cold build under
			// load took longer and failed the command).
			bin := binary(c.image, argv[0])
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			res, err := exec.CommandContext(ctx, bin, argv[1:]...).CombinedOutput()
			cancel()
			if err != nil {
				t.Errorf("%s: %s/%s (%s): %s: %v\n%s", base, c.deployment, c.name, c.image, strings.Join(argv, " "), err, tail(string(res), 2000))
			}
		}
	}
}

// TestAutoscalerOverlayWithCertManager dry-runs kubernetes/deploy/autoscaler the way its
// kustomization.yaml says to apply it, against an API server with cert-manager's CRDs (from the
// module build/certmanager pins, never fetched from GitHub): without them, and then without
// the namespace, kubectl fails with the errors the comments name; with both, every object passes.
func TestAutoscalerOverlayWithCertManager(t *testing.T) {
	root, err := localcontrolplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	crdDir := certManagerCRDs(t, root)
	env := testenv.Start(t)
	autoscaler := here(t, "autoscaler")

	out, err := kubectl(t, env, "apply", "--dry-run=server", "-k", autoscaler)
	if err == nil || !strings.Contains(out, `no matches for kind "Certificate" in version "cert-manager.io/v1"`) {
		t.Fatalf("dry run without cert-manager's CRDs: %v\n%s", err, out)
	}

	var files []string
	for _, kind := range []string{"certificates", "issuers"} {
		files = append(files, "-f", filepath.Join(crdDir, "cert-manager.io_"+kind+".yaml"))
	}
	if out, err := kubectl(t, env, append([]string{"apply", "--server-side"}, files...)...); err != nil {
		t.Fatalf("install cert-manager's CRDs: %v\n%s", err, out)
	}
	if out, err := kubectl(t, env, "wait", "--for", "condition=Established", "--timeout", "60s",
		"crd/certificates.cert-manager.io", "crd/issuers.cert-manager.io"); err != nil {
		t.Fatalf("cert-manager's CRDs not established: %v\n%s", err, out)
	}

	out, err = kubectl(t, env, "apply", "--dry-run=server", "-k", autoscaler)
	if err == nil || !strings.Contains(out, `namespaces "machinist-system" not found`) {
		t.Fatalf("dry run without the namespace: %v\n%s", err, out)
	}

	if out, err := kubectl(t, env, "create", "namespace", "machinist-system"); err != nil {
		t.Fatalf("kubectl create namespace: %v\n%s", err, out)
	}
	out, err = kubectl(t, env, "apply", "--dry-run=server", "-k", autoscaler)
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server -k autoscaler: %v\n%s", err, out)
	}
	for _, want := range []string{
		"issuer.cert-manager.io/machinist-autoscaler-selfsigned created (server dry run)",
		"certificate.cert-manager.io/machinist-autoscaler-server created (server dry run)",
		"certificate.cert-manager.io/machinist-autoscaler-ca created (server dry run)",
		"deployment.apps/machinist-autoscaler created (server dry run)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	// The install command in the comments names the cert-manager release the test uses.
	pinned := regexp.MustCompile(`(?m)^require github\.com/cert-manager/cert-manager (v\S+)$`).FindSubmatch(mustRead(t, filepath.Join(root, "build", "certmanager", "go.mod")))
	if pinned == nil {
		t.Fatal("build/certmanager/go.mod pins no cert-manager")
	}
	if k := string(mustRead(t, filepath.Join(autoscaler, "kustomization.yaml"))); !strings.Contains(k, "/download/"+string(pinned[1])+"/cert-manager.yaml") {
		t.Errorf("autoscaler/kustomization.yaml does not install cert-manager %s, the release build/certmanager pins", pinned[1])
	}
}

// certManagerCRDs returns the deploy/crds directory of the cert-manager module that
// build/certmanager pins, downloading the module through the Go module proxy (or taking it from
// the module cache).
func certManagerCRDs(t *testing.T, root string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", "github.com/cert-manager/cert-manager")
	cmd.Dir = filepath.Join(root, "build", "certmanager")
	out, err := cmd.Output()
	var mod struct{ Dir, Error string }
	if jsonErr := json.Unmarshal(out, &mod); err != nil || jsonErr != nil || mod.Dir == "" {
		t.Fatalf("go mod download github.com/cert-manager/cert-manager (in build/certmanager): %v %s %s", err, mod.Error, out)
	}
	return filepath.Join(mod.Dir, "deploy", "crds")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return tail(strings.Join(out, "\n"), 20000)
}
