package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/harness/localcontrolplane"
	"github.com/machinist-io/machinist/harness/testenv"
)

// run runs the CLI in-process and returns stdout and the rendered error ("" when none).
func run(t *testing.T, args ...string) (string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := newApp(&stdout, &stderr).RunContext(context.Background(), append([]string{"machinist"}, args...))
	if err != nil {
		return stdout.String(), describeError(err)
	}
	return stdout.String(), ""
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, errText := run(t, args...)
	if errText != "" {
		t.Fatalf("machinist %s: %s", strings.Join(args, " "), errText)
	}
	return out
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const localClass = `apiVersion: machine.sapcloud.io/v1alpha1
kind: MachineClass
metadata:
  name: local-dev
  namespace: default
provider: Local
providerSpec:
  cluster: dev
  cpu: 2
  memory: 4Gi
  heartbeatInterval: 200ms
  nodeMonitorGracePeriod: 2s
`

func TestProvidersAndVersion(t *testing.T) {
	out := mustRun(t, "providers")
	for _, name := range registry.Names() {
		if !strings.Contains(out, name) {
			t.Fatalf("providers output lacks %s:\n%s", name, out)
		}
	}
	var list []struct{ Name, Description string }
	if err := json.Unmarshal([]byte(mustRun(t, "providers", "-o", "json")), &list); err != nil || len(list) != len(registry.Names()) {
		t.Fatalf("providers -o json: %v %v", list, err)
	}
	if out := mustRun(t, "version"); !strings.HasPrefix(out, "machinist ") {
		t.Fatalf("version: %q", out)
	}
}

func TestDriverCommandsLocal(t *testing.T) {
	state := t.TempDir()
	class := writeFile(t, "class.yaml", localClass)
	flags := []string{"--class", class, "--state-dir", state}

	out := mustRun(t, append([]string{"driver", "create", "--machine", "m1"}, flags...)...)
	if !strings.Contains(out, "providerID: local:///m1") {
		t.Fatalf("create output:\n%s", out)
	}
	var created machineView
	out = mustRun(t, append([]string{"driver", "create", "--machine", "m1", "-o", "json"}, flags...)...)
	if err := json.Unmarshal([]byte(out), &created); err != nil || created.ProviderID != "local:///m1" {
		t.Fatalf("create -o json (idempotent): %q %v", out, err)
	}
	mustRun(t, append([]string{"driver", "create", "--machine", "m2"}, flags...)...)

	out = mustRun(t, append([]string{"driver", "list"}, flags...)...)
	if !strings.Contains(out, "m1") || !strings.Contains(out, "local:///m2") {
		t.Fatalf("list output:\n%s", out)
	}
	var entries []struct{ ProviderID, Machine string }
	if err := json.Unmarshal([]byte(mustRun(t, append([]string{"driver", "list", "-o", "json"}, flags...)...)), &entries); err != nil || len(entries) != 2 {
		t.Fatalf("list -o json: %v %v", entries, err)
	}

	out = mustRun(t, "driver", "heartbeat", "--machine", "m1", "--stop", "--state-dir", state)
	if !strings.Contains(out, "stopped") {
		t.Fatalf("heartbeat --stop: %q", out)
	}
	if _, err := os.Stat(filepath.Join(state, "local", "heartbeat", "m1")); err != nil {
		t.Fatalf("the switch is not in the state dir: %v", err)
	}
	out = mustRun(t, "driver", "heartbeat", "--machine", "m1", "--start", "--state-dir", state, "-o", "json")
	if !strings.Contains(out, `"heartbeat": "running"`) {
		t.Fatalf("heartbeat --start: %q", out)
	}

	pv := writeFile(t, "pv.yaml", `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: PersistentVolume
  metadata: {name: a}
  spec: {csi: {driver: local.csi.machinist.io, volumeHandle: vol-a}}
- apiVersion: v1
  kind: PersistentVolume
  metadata: {name: b}
  spec: {nfs: {server: nfs.example, path: /}}
`)
	out = mustRun(t, append([]string{"driver", "volumes", "--pv", pv}, flags...)...)
	if !strings.Contains(out, "1 of 2 volumes") || !strings.Contains(out, "vol-a") {
		t.Fatalf("volumes output:\n%s", out)
	}

	mustRun(t, append([]string{"driver", "delete", "--machine", "m1", "--provider-id", "local:///m1"}, flags...)...)
	_, errText := run(t, append([]string{"driver", "status", "--machine", "m1"}, flags...)...)
	if !strings.Contains(errText, "NotFound") || !strings.Contains(errText, "what to do:") {
		t.Fatalf("status after delete: %q", errText)
	}
	mustRun(t, append([]string{"driver", "status", "--machine", "m2"}, flags...)...)
}

// runErr runs the CLI in-process and returns stdout, stderr and the rendered error.
func runErr(t *testing.T, args ...string) (string, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := newApp(&stdout, &stderr).RunContext(context.Background(), append([]string{"machinist"}, args...))
	if err != nil {
		return stdout.String(), stderr.String(), describeError(err)
	}
	return stdout.String(), stderr.String(), ""
}

// An unknown field is a warning line (the call goes ahead, as with Gardener's providers); with
// --strict it is refused as before.
func TestDriverSpecWarningsAndStrict(t *testing.T) {
	state := t.TempDir()
	loose := writeFile(t, "loose.yaml", strings.Replace(localClass, "cpu: 2", "cpus: 2\n  Zone: z9", 1))
	out, stderr, errText := runErr(t, "driver", "create", "--class", loose, "--machine", "m", "--state-dir", state, "-o", "json")
	if errText != "" || !strings.Contains(out, `"providerID": "local:///m"`) {
		t.Fatalf("lenient create: %q %q", out, errText)
	}
	for _, want := range []string{
		"warning: MachineClass local-dev: providerSpec.Zone: unknown field: ignored (field names are case-sensitive: write zone)\n",
		"warning: MachineClass local-dev: providerSpec.cpus: unknown field: ignored\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q lacks %q", stderr, want)
		}
	}
	if strings.Contains(out, "warning") {
		t.Errorf("warnings on stdout break -o json: %q", out)
	}
	_, stderr, errText = runErr(t, "driver", "create", "--class", loose, "--machine", "m2", "--state-dir", state, "--strict")
	for _, want := range []string{"InvalidArgument", "providerSpec.cpus: unknown field", "providerSpec.Zone: unknown field (did you mean zone?", "fix the MachineClass field"} {
		if !strings.Contains(errText, want) {
			t.Fatalf("strict error %q lacks %q", errText, want)
		}
	}
	if strings.Contains(stderr, "warning:") {
		t.Errorf("strict mode printed warnings too: %q", stderr)
	}
	if out := mustRun(t, "driver", "list", "--class", loose, "--state-dir", state); strings.Contains(out, "m2") {
		t.Fatalf("a refused create made a machine:\n%s", out)
	}
	_, _, errText = runErr(t, "driver", "list", "--class", loose, "--strict", "--endpoint", "127.0.0.1:1")
	if !strings.Contains(errText, "--strict") {
		t.Fatalf("--strict with --endpoint: %q", errText)
	}
}

func TestDriverErrorsSayWhatToDo(t *testing.T) {
	state := t.TempDir()
	bad := writeFile(t, "bad.yaml", strings.Replace(localClass, "cpu: 2", "cpu: two", 1))
	_, errText := run(t, "driver", "create", "--class", bad, "--machine", "m", "--state-dir", state)
	for _, want := range []string{"InvalidArgument", "providerSpec.cpu", "fix the MachineClass field"} {
		if !strings.Contains(errText, want) {
			t.Fatalf("error %q lacks %q", errText, want)
		}
	}
	unknown := writeFile(t, "unknown.yaml", strings.Replace(localClass, "provider: Local", "provider: nimbus", 1))
	_, errText = run(t, "driver", "create", "--class", unknown, "--machine", "m", "--state-dir", state)
	if !strings.Contains(errText, "FailedPrecondition") || !strings.Contains(errText, "provider_nimbus") {
		t.Fatalf("unknown provider error: %q", errText)
	}
	_, errText = run(t, "driver", "create", "--class", writeFile(t, "s.yaml", "kind: Secret\n"), "--machine", "m")
	if !strings.Contains(errText, "holds a Secret, not a MachineClass") {
		t.Fatalf("wrong kind error: %q", errText)
	}
	_, errText = run(t, "driver", "create", "--class", bad)
	if !strings.Contains(errText, "--machine is required") {
		t.Fatalf("missing machine error: %q", errText)
	}
	_, errText = run(t, "--log-format", "xml", "providers")
	if !strings.Contains(errText, "--log-format") {
		t.Fatalf("bad log format error: %q", errText)
	}
}

// TestDriverCreateMakesANode runs the CLI against the real API server: the created machine's
// node is registered before the command returns.
func TestDriverCreateMakesANode(t *testing.T) {
	env := testenv.Start(t)
	state := t.TempDir()
	class := writeFile(t, "class.yaml", localClass)
	mustRun(t, "driver", "create", "--class", class, "--machine", "cli-node", "--state-dir", state, "--target-kubeconfig", env.KubeconfigPath)
	node, err := env.Clientset().CoreV1().Nodes().Get(context.Background(), "cli-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Spec.ProviderID != "local:///cli-node" {
		t.Fatalf("providerID %q", node.Spec.ProviderID)
	}
	ready := false
	for _, c := range node.Status.Conditions {
		ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
	}
	if !ready {
		t.Fatalf("node not Ready: %+v", node.Status.Conditions)
	}
	mustRun(t, "driver", "delete", "--class", class, "--machine", "cli-node", "--state-dir", state, "--target-kubeconfig", env.KubeconfigPath)
	if _, err := env.Clientset().CoreV1().Nodes().Get(context.Background(), "cli-node", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("node still there after delete: %v", err)
	}
}

func repoPath(t *testing.T, rel string) string {
	t.Helper()
	root, err := localcontrolplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, rel)
}
