//go:build !slim

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/harness/testenv"
)

const planClass = `apiVersion: machine.sapcloud.io/v1alpha1
kind: MachineClass
metadata:
  name: small
  namespace: default
provider: local
providerSpec:
  cluster: plan
`

const planDeployment = `apiVersion: machine.sapcloud.io/v1alpha1
kind: MachineDeployment
metadata:
  name: workers
spec:
  replicas: 2
  selector:
    matchLabels: {pool: workers}
  strategy:
    type: RollingUpdate
    rollingUpdate: {maxSurge: 1, maxUnavailable: 0}
  template:
    metadata:
      labels: {pool: workers}
    spec:
      class: {kind: MachineClass, name: CLASS}
`

// runPlanCLI runs `machinist plan` in-process, returning stdout, the error text and the exit code
// main would exit with.
func runPlanCLI(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	app := newApp(&stdout, &stderr)
	app.Reader = strings.NewReader(stdin)
	err := app.RunContext(context.Background(), append([]string{"machinist", "plan"}, args...))
	if err != nil {
		return stdout.String(), describeError(err), exitCode(err)
	}
	return stdout.String(), "", 0
}

// TestPlanCLI: plan against a real API server: JSON with the stable field names, exit code 3 when
// something would be blocked and 0 otherwise, manifests from a directory or stdin, nothing
// created.
func TestPlanCLI(t *testing.T) {
	env := testenv.Start(t)
	kc := env.KubeconfigPath
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "class.yaml"), []byte(planClass), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "workers.yaml"), []byte(strings.ReplaceAll(planDeployment, "CLASS", "small")), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("BlockedExitsThreeWithJSON", func(t *testing.T) {
		out, errText, code := runPlanCLI(t, strings.ReplaceAll(planDeployment, "CLASS", "absent"), "--kubeconfig", kc, "-f", "-", "-o", "json")
		if code != exitBlocked || !strings.Contains(errText, "would be blocked") {
			t.Fatalf("exit %d (%q), want %d", code, errText, exitBlocked)
		}
		var results []map[string]any
		if err := json.Unmarshal([]byte(out), &results); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		r := results[0]
		for _, field := range []string{"kind", "name", "action", "machinesReplaced", "maxSurge", "maxUnavailable", "blockedBy"} {
			if _, ok := r[field]; !ok {
				t.Errorf("JSON lacks %q: %s", field, out)
			}
		}
		if r["kind"] != "MachineDeployment" || r["name"] != "workers" || r["action"] != "Blocked" || !strings.Contains(out, "MachineClass default/absent") {
			t.Fatalf("plan %s, want workers Blocked naming class default/absent", out)
		}
	})

	t.Run("ScaleExitsZero", func(t *testing.T) {
		class := &v1alpha1.MachineClass{}
		if err := yaml.Unmarshal([]byte(planClass), class); err != nil {
			t.Fatal(err)
		}
		if err := env.Client().Create(context.Background(), class); err != nil {
			t.Fatal(err)
		}
		out, errText, code := runPlanCLI(t, "", "--kubeconfig", kc, "-f", dir)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errText)
		}
		if !strings.Contains(out, "MachineDeployment  default    workers  Scale") || !strings.Contains(out, "new machines get class small") {
			t.Fatalf("table:\n%s", out)
		}
		var list v1alpha1.MachineDeploymentList
		if err := env.Client().List(context.Background(), &list); err != nil || len(list.Items) != 0 {
			t.Fatalf("plan created deployments: %v %v", list.Items, err)
		}
	})

	t.Run("OtherKindsAreLeftOut", func(t *testing.T) {
		_, errText, code := runPlanCLI(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "--kubeconfig", kc, "-f", "-")
		if code != 1 || !strings.Contains(errText, "no MachineDeployment, MachineSet or MachineClass found") {
			t.Fatalf("exit %d, %q: want nothing to plan", code, errText)
		}
		stdin := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\n" + strings.ReplaceAll(planDeployment, "CLASS", "small")
		var stderr bytes.Buffer
		app := newApp(&bytes.Buffer{}, &stderr)
		app.Reader = strings.NewReader(stdin)
		if err := app.RunContext(context.Background(), []string{"machinist", "plan", "--kubeconfig", kc, "-f", "-"}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stderr.String(), "left out 1 objects of other kinds (the controllers do not act on them): ConfigMap/x") {
			t.Fatalf("stderr %q: want the ConfigMap named", stderr.String())
		}
	})
}
