package main

import (
	"strings"
	"testing"
)

func deps(pkgs ...pkg) map[string]pkg {
	out := map[string]pkg{}
	for _, p := range pkgs {
		out[p.path] = p
	}
	return out
}

func TestCheckSlimCatchesLeaks(t *testing.T) {
	root := pkg{path: module + "/cmd/machinist", module: module, imports: []string{module + "/providers/all"}}
	all := pkg{path: module + "/providers/all", module: module, imports: []string{module + "/providers/local"}}
	local := pkg{path: module + "/providers/local", module: module}
	providers := []string{"local", "nimbus", "openstack"}
	exclusive := map[string][]string{"nimbus": {"example.com/nimbus-sdk"}}
	own := map[string]bool{module: true}

	if probs := checkSlim("local", providers, deps(root, all, local), own, exclusive); len(probs) != 0 {
		t.Fatalf("clean build reported: %v", probs)
	}

	cases := map[string]struct {
		pkgs []pkg
		want string
	}{
		"other provider package": {
			[]pkg{root, {path: all.path, module: module, imports: []string{local.path, module + "/providers/openstack/fake"}}, local,
				{path: module + "/providers/openstack/fake", module: module}},
			"links provider package " + module + "/providers/openstack/fake (via cmd/machinist -> providers/all -> providers/openstack/fake)",
		},
		"known SDK": {
			[]pkg{root, all, {path: local.path, module: module, imports: []string{"github.com/gophercloud/gophercloud/v2"}},
				{path: "github.com/gophercloud/gophercloud/v2", module: "github.com/gophercloud/gophercloud/v2"}},
			"links module github.com/gophercloud/gophercloud/v2 of provider openstack",
		},
		"derived SDK of a new provider": {
			[]pkg{root, all, {path: local.path, module: module, imports: []string{"example.com/nimbus-sdk/api"}},
				{path: "example.com/nimbus-sdk/api", module: "example.com/nimbus-sdk"}},
			"links module example.com/nimbus-sdk of provider nimbus",
		},
		"own provider missing": {
			[]pkg{root, {path: all.path, module: module}},
			"providers/local is not linked in",
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			probs := checkSlim("local", providers, deps(c.pkgs...), own, exclusive)
			if !strings.Contains(strings.Join(probs, "\n"), c.want) {
				t.Fatalf("problems %q lack %q", probs, c.want)
			}
		})
	}

	// A module the provider itself needs is not a leak even if another provider needs it too.
	shared := map[string]bool{module: true, "example.com/nimbus-sdk": true}
	build := deps(root, all, pkg{path: local.path, module: module, imports: []string{"example.com/nimbus-sdk/api"}},
		pkg{path: "example.com/nimbus-sdk/api", module: "example.com/nimbus-sdk"})
	if probs := checkSlim("local", providers, build, shared, exclusive); len(probs) != 0 {
		t.Fatalf("shared module reported: %v", probs)
	}
}

func TestRefusedAndMissing(t *testing.T) {
	root := pkg{path: module + "/cmd/machinist", module: module, imports: []string{module + "/providers/local", module + "/grpcbridge"}}
	local := pkg{path: module + "/providers/local", module: module, imports: []string{"k8s.io/client-go/kubernetes"}}
	bridge := pkg{path: module + "/grpcbridge", module: module}
	clientset := pkg{path: "k8s.io/client-go/kubernetes", module: "k8s.io/client-go", imports: []string{"k8s.io/client-go/kubernetes/scheme"}}
	scheme := pkg{path: "k8s.io/client-go/kubernetes/scheme", module: "k8s.io/client-go"}
	build := deps(root, local, bridge, clientset, scheme)

	probs := refused(build, notInSlim)
	if len(probs) != 1 {
		t.Fatalf("refused = %q, want one problem", probs)
	}
	for _, want := range []string{"links k8s.io/client-go/kubernetes (2 packages", "internal/kubeclient", "cmd/machinist -> providers/local -> k8s.io/client-go/kubernetes"} {
		if !strings.Contains(probs[0], want) {
			t.Errorf("problem %q lacks %q", probs[0], want)
		}
	}
	// A sibling with a common prefix is not below the rule's path.
	sibling := deps(root, pkg{path: "k8s.io/client-go/kubernetesfoo", module: "k8s.io/client-go"})
	if probs := refused(sibling, notInSlim); len(probs) != 0 {
		t.Errorf("sibling package refused: %q", probs)
	}

	probs = missing(build, inSlim)
	if len(probs) != 2 || !strings.Contains(strings.Join(probs, "\n"), "grpcbridge/dialin") || !strings.Contains(strings.Join(probs, "\n"), "core/registry") {
		t.Errorf("missing = %q, want core/registry and grpcbridge/dialin", probs)
	}

	// An exact rule leaves the packages below it alone.
	exact := []rule{{module + "/core", "only the root", true}}
	if probs := refused(deps(root, pkg{path: module + "/core/registry", module: module}), exact); len(probs) != 0 {
		t.Errorf("a package below an exact rule refused: %q", probs)
	}
	if probs := refused(deps(root, pkg{path: module + "/core", module: module}), exact); len(probs) != 1 {
		t.Errorf("the package of an exact rule not refused: %q", probs)
	}
	// Every package of harness/testenv is test-only; the local control plane is not.
	if probs := refused(deps(root, pkg{path: module + "/harness/testenv/mcmcrds", module: module}), testOnly); len(probs) != 1 {
		t.Errorf("harness/testenv/mcmcrds not refused: %q", probs)
	}
	if probs := refused(deps(root, pkg{path: module + "/harness/localcontrolplane", module: module}), testOnly); len(probs) != 0 {
		t.Errorf("harness/localcontrolplane refused: %q", probs)
	}
}

// TestOnlyForItsProvider: client-go and Prometheus are refused in a cloud provider's slim
// binary, and client-go is allowed in the local provider's, which joins nodes with it.
func TestOnlyForItsProvider(t *testing.T) {
	local := notNeeded(onlyForItsProvider, map[string]bool{"k8s.io/client-go": true, "k8s.io/api": true})
	cloud := notNeeded(onlyForItsProvider, map[string]bool{"github.com/Azure/azure-sdk-for-go/sdk/azcore": true})
	if len(cloud) != len(onlyForItsProvider) {
		t.Errorf("a cloud provider may link %d of %d shared-only modules", len(onlyForItsProvider)-len(cloud), len(onlyForItsProvider))
	}
	deps := map[string]pkg{
		module + "/cmd/machinist": {path: module + "/cmd/machinist", imports: []string{"k8s.io/client-go/rest"}},
		"k8s.io/client-go/rest":   {path: "k8s.io/client-go/rest", module: "k8s.io/client-go"},
	}
	if got := refused(deps, local); len(got) != 0 {
		t.Errorf("the local provider's slim binary may link client-go, got %v", got)
	}
	if got := refused(deps, cloud); len(got) != 1 || !strings.Contains(got[0], "k8s.io/client-go") {
		t.Errorf("a cloud provider's slim binary linking client-go: got %v", got)
	}
}
