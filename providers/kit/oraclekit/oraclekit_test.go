package oraclekit_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/providers/kit/oraclekit"
)

// TestObjectsAndDriver: the objects of a call are the controllers'; machinist's driver answers
// them as Results, a list's machines included, an error as its code.
func TestObjectsAndDriver(t *testing.T) {
	o := oraclekit.Objects{Provider: "mem", Namespace: "shoot--oracle", SecretName: "cloudprovider", Scenario: "basic"}
	spec := map[string]any{"cluster": "shoot--oracle", "role": "node"}
	create, err := o.Call(oraclekit.Create, spec, map[string][]byte{"userData": []byte("#cloud-config")}, oraclekit.Machine{Name: "m-1", Annotations: map[string]string{"a": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if c := create.MachineClass; c.Name != "oracle-basic" || c.Namespace != "shoot--oracle" || c.SecretRef.Name != "cloudprovider" ||
		create.Machine.UID != "uid-basic-m-1" || create.Machine.Spec.Class.Name != "oracle-basic" || create.Machine.Spec.NodeTemplateSpec.Annotations["a"] != "b" {
		t.Errorf("objects %+v %+v", create.MachineClass, create.Machine)
	}
	d := memdriver.New(memdriver.NewCloud())
	ctx := context.Background()
	r, err := oraclekit.CallDriver(ctx, d, create)
	if err != nil || r.Code != "OK" || r.ProviderID == "" {
		t.Fatalf("create = %+v, %v", r, err)
	}
	list, _ := o.Call(oraclekit.List, spec, nil, oraclekit.Machine{})
	if r, err := oraclekit.CallDriver(ctx, d, list); err != nil || list.Machine != nil || len(r.MachineList) != 1 {
		t.Errorf("list = %+v, %v", r, err)
	}
	other, _ := o.Call(oraclekit.Create, map[string]any{"cluster": 1}, nil, oraclekit.Machine{Name: "m-2"})
	if r, _ := oraclekit.CallDriver(ctx, d, other); r.Code != "InvalidArgument" || r.Message == "" {
		t.Errorf("a bad class = %+v", r)
	}
	if _, err := oraclekit.CallDriver(ctx, d, oraclekit.Call{Op: "reboot"}); err == nil {
		t.Error("an unknown operation was called")
	}
	if got := oraclekit.Label(2, oraclekit.Create, "m-1", "after a stockout"); got != "3 create m-1: after a stockout" {
		t.Errorf("Label = %q", got)
	}
}

// TestProcess speaks the oracle's protocol with a driver process: a call per line in, an
// answer per line out, in a home of its own that Close removes; one that ends early is an error
// naming its stderr.
func TestProcess(t *testing.T) {
	dir := t.TempDir()
	driver := filepath.Join(dir, "driver.sh")
	script := "#!/bin/sh\ncat \"$HOME/answer\" >/dev/null || exit 3\necho starting >&2\nwhile read -r line; do\n  case \"$line\" in *delete*) echo gone >&2; exit 4;; esac\n  cat \"$HOME/answer\"\ndone\n"
	if err := os.WriteFile(driver, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var home string
	cleaned := false
	p, err := oraclekit.StartProcess(driver, func(h string) ([]string, error) {
		home = h
		return []string{"ORACLE=1"}, os.WriteFile(filepath.Join(h, "answer"), []byte(`{"code":"NotFound","message":"no VM"}`+"\n"), 0o600)
	}, nil, func() error { cleaned = true; return nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := p.Call(ctx, oraclekit.Call{Op: oraclekit.Status})
	if err != nil || r.Code != "NotFound" || r.Message != "no VM" {
		t.Fatalf("status = %+v, %v", r, err)
	}
	if _, err := p.Call(ctx, oraclekit.Call{Op: oraclekit.Delete}); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Errorf("a call the process ends on = %v, want an error with its stderr", err)
	}
	if err := p.Close(); err == nil || !strings.Contains(err.Error(), "exit status 4") {
		t.Errorf("Close = %v, want the exit status", err)
	}
	if _, err := os.Stat(home); !os.IsNotExist(err) || !cleaned {
		t.Errorf("home %s after Close: %v; cleanup ran: %v", home, err, cleaned)
	}
}

// TestCorpus writes a transcript and reads it back; a transcript of another scenario or driver is
// refused.
func TestCorpus(t *testing.T) {
	type req struct{ Op string }
	dir := t.TempDir()
	tr := oraclekit.Transcript[req, int]{Scenario: "basic", Driver: oraclekit.Gardener, Steps: []oraclekit.Exchange[req]{{Step: "1 create m-1", Result: oraclekit.Result{Code: "OK"}, Requests: []req{{"insert"}}}}, Left: 1}
	if err := oraclekit.WriteCorpus(dir, tr); err != nil {
		t.Fatal(err)
	}
	got, err := oraclekit.ReadCorpus[req, int](dir, "basic")
	if err != nil || len(got.Steps) != 1 || got.Steps[0].Requests[0].Op != "insert" || got.Left != 1 {
		t.Errorf("read back %+v, %v", got, err)
	}
	tr.Driver = oraclekit.Machinist
	if err := oraclekit.WriteCorpus(dir, tr); err != nil {
		t.Fatal(err)
	}
	if _, err := oraclekit.ReadCorpus[req, int](dir, "basic"); err == nil {
		t.Error("machinist's transcript was read as Gardener's")
	}
	b, _ := oraclekit.Marshal(map[string]string{"a": "<b>"})
	if !strings.Contains(string(b), "<b>") {
		t.Errorf("Marshal escaped HTML: %s", b)
	}
}
