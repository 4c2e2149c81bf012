package autoscaler_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/machinist-io/machinist/grpcbridge/autoscaler/clusterautoscaler"
	"github.com/machinist-io/machinist/harness/testenv"
)

const deployDir = "../../kubernetes/deploy/autoscaler"

// manifests reads every object of the deployment, by kind/name.
func manifests(t *testing.T) map[string]*unstructured.Unstructured {
	t.Helper()
	var k struct {
		Resources []string `json:"resources"`
	}
	data, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(deployDir, "*.yaml"))
	var listed []string
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			listed = append(listed, filepath.Base(f))
		}
	}
	sort.Strings(listed)
	resources := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(listed, resources) {
		t.Fatalf("kustomization resources %v, files %v", resources, listed)
	}
	out := map[string]*unstructured.Unstructured{}
	for _, f := range k.Resources {
		data, err := os.ReadFile(filepath.Join(deployDir, f))
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if err.Error() == "EOF" {
					break
				}
				t.Fatalf("%s: %v", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			// Objects carry their namespace: kustomize's namespace: would move the RoleBinding
			// out of the Machine* objects' namespace.
			if u.GetNamespace() == "" && u.GetKind() != "Namespace" && !strings.HasPrefix(u.GetKind(), "Cluster") {
				t.Errorf("%s: %s/%s has no namespace", f, u.GetKind(), u.GetName())
			}
			out[u.GetKind()+"/"+u.GetName()] = u
		}
	}
	return out
}

func get(t *testing.T, objs map[string]*unstructured.Unstructured, key string) *unstructured.Unstructured {
	t.Helper()
	o, ok := objs[key]
	if !ok {
		t.Fatalf("no %s in the deployment", key)
	}
	return o
}

func str(t *testing.T, o *unstructured.Unstructured, fields ...string) string {
	t.Helper()
	s, ok, err := unstructured.NestedString(o.Object, fields...)
	if !ok || err != nil {
		t.Fatalf("%s/%s: no %s", o.GetKind(), o.GetName(), strings.Join(fields, "."))
	}
	return s
}

// container returns args and volume mounts (mountPath by secret name) of a Deployment's first
// container.
func container(t *testing.T, d *unstructured.Unstructured) (args []string, mounts map[string]string) {
	t.Helper()
	spec, _, _ := unstructured.NestedMap(d.Object, "spec", "template", "spec")
	c := spec["containers"].([]any)[0].(map[string]any)
	for _, key := range []string{"command", "args"} {
		if v, ok := c[key].([]any); ok {
			for _, a := range v {
				args = append(args, a.(string))
			}
		}
	}
	secretOf := map[string]string{}
	for _, v := range spec["volumes"].([]any) {
		v := v.(map[string]any)
		if s, ok := v["secret"].(map[string]any); ok {
			secretOf[v["name"].(string)] = s["secretName"].(string)
		}
	}
	mounts = map[string]string{}
	for _, m := range c["volumeMounts"].([]any) {
		m := m.(map[string]any)
		mounts[secretOf[m["name"].(string)]] = m["mountPath"].(string)
	}
	return args, mounts
}

func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// TestDeployManifestsAgree checks what only works when the manifests agree with each other: the
// cloud-config's host is in the server certificate, its files are where the client certificate
// is mounted, the server's flags point at its mounted certificate, and the ports line up. Then
// every core object is validated by a real kube-apiserver (server-side dry run).
func TestDeployManifestsAgree(t *testing.T) {
	objs := manifests(t)
	cfg, err := clusterautoscaler.ParseCloudConfig([]byte(str(t, get(t, objs, "Secret/cluster-autoscaler-cloud-config"), "stringData", "cloud-config")))
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(cfg.Address)
	if err != nil {
		t.Fatal(err)
	}
	dnsNames, _, _ := unstructured.NestedStringSlice(get(t, objs, "Certificate/machinist-autoscaler-server").Object, "spec", "dnsNames")
	if !slices.Contains(dnsNames, host) {
		t.Errorf("cloud-config host %q is not a dnsName of the server certificate %v: Cluster Autoscaler would refuse the server", host, dnsNames)
	}
	if cfg.Cert == "" || cfg.GRPCTimeout.Duration == 0 {
		t.Errorf("cloud-config %+v: want cert (TLS) and grpc_timeout", cfg)
	}

	caArgs, caMounts := container(t, get(t, objs, "Deployment/cluster-autoscaler"))
	clientSecret := str(t, get(t, objs, "Certificate/cluster-autoscaler-client"), "spec", "secretName")
	for _, f := range []string{cfg.Cert, cfg.Key, cfg.CACert} {
		if path.Dir(f) != caMounts[clientSecret] {
			t.Errorf("cloud-config file %s is not in %s, where secret %s is mounted", f, caMounts[clientSecret], clientSecret)
		}
	}
	cloudConfig := flagValue(caArgs, "--cloud-config")
	if flagValue(caArgs, "--cloud-provider") != "externalgrpc" || path.Dir(cloudConfig) != caMounts["cluster-autoscaler-cloud-config"] {
		t.Errorf("Cluster Autoscaler args %v do not select externalgrpc with the mounted cloud-config", caArgs)
	}

	mArgs, mMounts := container(t, get(t, objs, "Deployment/machinist-autoscaler"))
	serverSecret := str(t, get(t, objs, "Certificate/machinist-autoscaler-server"), "spec", "secretName")
	for _, f := range []string{"--cert", "--key", "--cacert"} {
		if path.Dir(flagValue(mArgs, f)) != mMounts[serverSecret] {
			t.Errorf("machinist %s=%s is not in %s, where %s is mounted", f, flagValue(mArgs, f), mMounts[serverSecret], serverSecret)
		}
	}
	if _, p, _ := net.SplitHostPort(flagValue(mArgs, "--listen")); p != port {
		t.Errorf("machinist listens on %s, cloud-config dials port %s", flagValue(mArgs, "--listen"), port)
	}
	if !strings.HasPrefix(host, "machinist-autoscaler.") && host != "machinist-autoscaler" {
		t.Errorf("cloud-config host %q is not the machinist-autoscaler Service", host)
	}

	env := testenv.Start(t, testenv.WithCRDDirs())
	c := env.Client()
	ctx := context.Background()
	ns := get(t, objs, "Namespace/machinist-system")
	if err := c.Create(ctx, ns.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	for key, o := range objs {
		if strings.HasPrefix(o.GetAPIVersion(), "cert-manager.io/") || o.GetKind() == "Namespace" {
			continue
		}
		if err := c.Create(ctx, o.DeepCopy(), client.DryRunAll); err != nil {
			t.Errorf("%s: the API server rejects it: %v", key, err)
		}
	}
}
