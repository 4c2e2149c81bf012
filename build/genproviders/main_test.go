package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFilesSelectProvidersByTag(t *testing.T) {
	files := Files([]string{"azure", "local"})
	all := string(files["all.go"])
	if !strings.Contains(all, "//go:build !provider_azure && !provider_local\n") {
		t.Errorf("all.go must build only without provider tags:\n%s", all)
	}
	for _, p := range []string{"azure", "local"} {
		if !strings.Contains(all, `"github.com/machinist-io/machinist/providers/`+p+`"`) {
			t.Errorf("all.go does not import %s", p)
		}
		one := string(files[p+".go"])
		if !strings.Contains(one, "//go:build provider_"+p+"\n") || !strings.Contains(one, "providers/"+p+`"`) {
			t.Errorf("%s.go:\n%s", p, one)
		}
		if !strings.HasPrefix(one, header) {
			t.Errorf("%s.go lacks the generated-code header", p)
		}
	}
	if !strings.Contains(string(files["doc.go"]), `var Providers = []string{"azure", "local"}`) {
		t.Errorf("doc.go:\n%s", files["doc.go"])
	}
	if _, ok := Files(nil)["all.go"]; ok {
		t.Error("no providers must not produce an all.go with an empty build constraint")
	}
}

func TestProvidersReadsDirectoriesWithRegisterGo(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"all", "local", "openstack", "notaprovider"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"all", "local", "openstack"} {
		if err := os.WriteFile(filepath.Join(dir, d, "register.go"), []byte("package x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	names, err := Providers(dir)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, ",") != "local,openstack" {
		t.Fatalf("Providers = %v", names)
	}

	if err := os.MkdirAll(filepath.Join(dir, "Bad-Name"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Bad-Name", "register.go"), []byte("package x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Providers(dir); err == nil || !strings.Contains(err.Error(), "Bad-Name") {
		t.Fatalf("an invalid directory name must be an error naming it: %v", err)
	}
}

func TestConstrainFakecloudsFollowsTheProviders(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("fakecloud_azure.go", "//go:build !slim && (provider_azure || (!provider_azure))\n\npackage main\n")
	write("fakecloud_test.go", "//go:build !slim\n\npackage main\n")
	names := []string{"azure", "foo", "local"}
	if err := constrainFakeclouds(dir, names); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "fakecloud_azure.go"))
	want := "//go:build !slim && (provider_azure || (!provider_azure && !provider_foo && !provider_local))\n\npackage main\n"
	if string(b) != want {
		t.Fatalf("rewritten:\n%s\nwant:\n%s", b, want)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "fakecloud_test.go")); !strings.HasPrefix(string(b), "//go:build !slim\n") {
		t.Fatalf("a test file was rewritten: %s", b)
	}
	write("fakecloud_gone.go", "//go:build !slim\n\npackage main\n")
	if err := constrainFakeclouds(dir, names); err == nil || !strings.Contains(err.Error(), `"gone"`) {
		t.Fatalf("a fake of no provider: %v", err)
	}
}
