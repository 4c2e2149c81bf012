package kubeconfig_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/machinist-io/machinist/internal/kubeconfig"
)

// write writes a kubeconfig whose current context reaches server, and returns its path.
func write(t *testing.T, dir, name, server string) string {
	t.Helper()
	body := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "` + server + `"}
users:
- name: u
  user: {token: secret-token}
contexts:
- name: ctx
  context: {cluster: c, user: u}
current-context: ctx
`
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// notInAPod makes rest.InClusterConfig fail here whatever the machine running the test is.
func notInAPod(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
}

func TestAFileIsThatFile(t *testing.T) {
	t.Setenv("KUBECONFIG", write(t, t.TempDir(), "env", "https://from-env:6443"))
	cfg, err := kubeconfig.Load(write(t, t.TempDir(), "flag", "https://from-flag:6443"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://from-flag:6443" || cfg.BearerToken != "secret-token" {
		t.Fatalf("host %q: want the flag's file, not $KUBECONFIG", cfg.Host)
	}
}

func TestEmptyIsKubeconfigEnvAsKubectlMergesIt(t *testing.T) {
	dir := t.TempDir()
	first := write(t, dir, "first", "https://first:6443")
	second := write(t, dir, "second", "https://second:6443")
	t.Setenv("KUBECONFIG", first+string(os.PathListSeparator)+filepath.Join(dir, "missing")+string(os.PathListSeparator)+second)
	cfg, err := kubeconfig.Load("")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://first:6443" {
		t.Fatalf("host %q: the first file of $KUBECONFIG wins, as in kubectl", cfg.Host)
	}
}

func TestEmptyNeverReadsTheHomeKubeconfig(t *testing.T) {
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".kube"), 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(home, ".kube"), "config", "https://someones-cluster:6443")
	t.Setenv("HOME", home)
	t.Setenv("KUBECONFIG", "")
	notInAPod(t)
	cfg, err := kubeconfig.Load("")
	if err == nil {
		t.Fatalf("Load(\"\") read %s; want an error outside a pod without $KUBECONFIG", cfg.Host)
	}
	if !strings.Contains(err.Error(), "pass a kubeconfig file") {
		t.Fatalf("error %q does not say what to do", err)
	}
}

func TestInClusterConfigOutsideAPodSaysSo(t *testing.T) {
	t.Setenv("KUBECONFIG", write(t, t.TempDir(), "env", "https://from-env:6443"))
	notInAPod(t)
	_, err := kubeconfig.Load(kubeconfig.InCluster)
	if err == nil || !strings.Contains(err.Error(), "inClusterConfig: not running in a pod") {
		t.Fatalf("Load(inClusterConfig) outside a pod: %v; want an error naming the value (never a file of that name or $KUBECONFIG)", err)
	}
}

func TestMissingOrEmptyFilesFail(t *testing.T) {
	dir := t.TempDir()
	if _, err := kubeconfig.Load(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing file: %v", err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := kubeconfig.Load(empty); err == nil || !strings.Contains(err.Error(), "no clusters") {
		t.Fatalf("empty file: %v", err)
	}
	notInAPod(t)
	t.Setenv("KUBECONFIG", filepath.Join(dir, "missing"))
	if _, err := kubeconfig.Load(""); err == nil || !strings.Contains(err.Error(), "$KUBECONFIG") {
		t.Fatalf("$KUBECONFIG naming a missing file: %v; want an error, not the in-cluster config", err)
	}
}
