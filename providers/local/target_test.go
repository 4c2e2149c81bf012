package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/machinist-io/machinist/core/registry"
)

// TestTargetConfig: registry.Env.Target is a *rest.Config or a kubeconfig path; a path that
// cannot be read fails at open, naming it, and any other type is refused with what is expected.
func TestTargetConfig(t *testing.T) {
	if cfg, err := targetConfig(nil); cfg != nil || err != nil {
		t.Errorf("nil target: %v, %v", cfg, err)
	}
	in := &rest.Config{Host: "https://127.0.0.1:6443"}
	if cfg, err := targetConfig(in); err != nil || cfg != in {
		t.Errorf("*rest.Config target: %v, %v", cfg, err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kc := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:7443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, err := targetConfig(registry.Kubeconfig(path)); err != nil || cfg.Host != "https://127.0.0.1:7443" {
		t.Errorf("kubeconfig target: %+v, %v", cfg, err)
	}
	missing := filepath.Join(t.TempDir(), "absent")
	if _, err := New(registry.Env{Target: registry.Kubeconfig(missing)}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing kubeconfig: %v, want an error naming %s", err, missing)
	}
	if _, err := targetConfig("https://127.0.0.1:6443"); err == nil || !strings.Contains(err.Error(), "registry.Kubeconfig") {
		t.Errorf("string target: %v, want a refusal saying what is expected", err)
	}
}
