//go:build !slim

package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/internal/syncbuf"
)

// TestFakecloud runs `machinist fakecloud NAME` as a user would and drives the provider against
// it with the printed Secret and the sample MachineClass: create, list and delete, and the state
// dump shows nothing left behind. The README shows the same steps.
func TestFakecloud(t *testing.T) {
	for _, tc := range []struct {
		name, class string
		count       func(state map[string][]any) int
	}{
		{"openstack", "openstack-machineclass.yaml", func(s map[string][]any) int { return len(s["servers"]) + len(s["ports"]) + len(s["volumes"]) }},
		{"azure", "azure-machineclass.yaml", func(s map[string][]any) int { return len(s["resources"]) }},
		{"aws", "aws-machineclass.yaml", func(s map[string][]any) int {
			return len(s["instances"]) + len(s["volumes"]) + len(s["networkInterfaces"]) + len(s["spotRequests"])
		}},
		{"gcp", "gcp-machineclass.yaml", func(s map[string][]any) int { return len(s["instances"]) + len(s["disks"]) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			stateFile := filepath.Join(dir, "state.json")
			stdout := &syncbuf.Buffer{}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- newApp(stdout, &syncbuf.Buffer{}).RunContext(ctx, []string{"machinist", "fakecloud", tc.name, "--listen", "127.0.0.1:0", "--state", stateFile})
			}()
			stopped := false
			stop := func() error {
				if stopped {
					return nil
				}
				stopped = true
				cancel()
				select {
				case err := <-done:
					return err
				case <-time.After(30 * time.Second):
					return errors.New("fakecloud did not stop within 30s")
				}
			}
			t.Cleanup(func() { _ = stop() })
			deadline := time.Now().Add(30 * time.Second)
			for !strings.Contains(stdout.String(), "userData") {
				if time.Now().After(deadline) {
					t.Fatalf("no secret printed: %q", stdout.String())
				}
				select {
				case err := <-done:
					t.Fatalf("fakecloud ended: %v", err)
				case <-time.After(20 * time.Millisecond):
				}
			}
			secret := filepath.Join(dir, "secret.yaml")
			if err := os.WriteFile(secret, []byte(stdout.String()), 0o600); err != nil {
				t.Fatal(err)
			}
			state := func() map[string][]any {
				t.Helper()
				b, err := os.ReadFile(stateFile)
				if err != nil {
					t.Fatal(err)
				}
				var s map[string]json.RawMessage
				if err := json.Unmarshal(b, &s); err != nil {
					t.Fatalf("state dump %s: %v", b, err)
				}
				out := map[string][]any{}
				for k, v := range s {
					var list []any
					if json.Unmarshal(v, &list) == nil {
						out[k] = list
					}
				}
				return out
			}
			flags := []string{"--class", repoPath(t, "kubernetes/samples/fakecloud/"+tc.class), "--secret", secret}
			out := mustRun(t, append([]string{"driver", "create", "--machine", "demo-1"}, flags...)...)
			id := regexp.MustCompile(`providerID: (\S+)`).FindStringSubmatch(out)
			if id == nil {
				t.Fatalf("create printed %q", out)
			}
			if n := tc.count(state()); n == 0 {
				t.Fatalf("the state dump shows nothing after create: %v", state())
			}
			if out := mustRun(t, append([]string{"driver", "list"}, flags...)...); !strings.Contains(out, "demo-1") || !strings.Contains(out, id[1]) {
				t.Fatalf("list printed %q", out)
			}
			mustRun(t, append([]string{"driver", "delete", "--machine", "demo-1", "--provider-id", id[1]}, flags...)...)
			if n := tc.count(state()); n != 0 {
				t.Fatalf("left in the fake after delete: %v", state())
			}
			if err := stop(); err != nil {
				t.Fatalf("fakecloud: %v", err)
			}
			if _, err := os.Stat(stateFile); err != nil {
				t.Fatalf("the final state dump: %v", err)
			}
		})
	}
}

func TestFakecloudServesOnLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:8443", ":0"} {
		_, errText := run(t, "fakecloud", "openstack", "--listen", addr)
		if !strings.Contains(errText, "loopback only") {
			t.Errorf("--listen %s: %q", addr, errText)
		}
	}
}

// The fakecloud_<provider>.go files are built exactly when their provider is: build/genproviders
// (make generate) gives them providers/all's constraint for that provider, so a provider build
// links no other provider's fake or SDK. This fails when that was not run.
func TestFakecloudFilesFollowProviderTags(t *testing.T) {
	allGo, err := os.ReadFile(repoPath(t, "providers/all/all.go"))
	if err != nil {
		t.Fatal(err)
	}
	noTags := regexp.MustCompile(`(?m)^//go:build (.+)$`).FindSubmatch(allGo)
	if noTags == nil {
		t.Fatal("providers/all/all.go has no build constraint")
	}
	files, _ := filepath.Glob("fakecloud_*.go")
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		n++
		provider := strings.TrimSuffix(strings.TrimPrefix(f, "fakecloud_"), ".go")
		if _, err := os.Stat(repoPath(t, "providers/"+provider)); err != nil {
			t.Errorf("%s: no provider %s", f, provider)
		}
		b, _ := os.ReadFile(f)
		want := "//go:build !slim && (provider_" + provider + " || (" + string(noTags[1]) + "))\n"
		if !strings.HasPrefix(string(b), want) {
			t.Errorf("%s must start with %q (providers/all's constraint)", f, want)
		}
	}
	if n == 0 {
		t.Fatal("no fakecloud_<provider>.go files")
	}
}

// Each provider README shows create, list and delete against its fake with the sample class, and
// the state dump to check that nothing leaked (TestFakecloud runs the same steps).
func TestFakecloudInProviderREADMEs(t *testing.T) {
	for _, name := range []string{"openstack", "azure", "aws", "gcp"} {
		readme, err := os.ReadFile(repoPath(t, "providers/"+name+"/README.md"))
		if err != nil {
			t.Fatal(err)
		}
		class := "--class kubernetes/samples/fakecloud/" + name + "-machineclass.yaml --secret /tmp/fake" + name + "-secret.yaml"
		for _, want := range []string{
			"machinist fakecloud " + name + " --listen 127.0.0.1:",
			"--state /tmp/fake" + name + ".json > /tmp/fake" + name + "-secret.yaml &",
			"machinist driver create " + class + " --machine demo-1",
			"machinist driver list " + class,
			"machinist driver delete " + class + " --machine demo-1",
			"nothing leaked",
			"/.fakecloud/faults",
		} {
			if !strings.Contains(string(readme), want) {
				t.Errorf("providers/%s/README.md lacks %q", name, want)
			}
		}
	}
}
