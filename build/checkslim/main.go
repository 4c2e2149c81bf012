// Command checkslim proves that each slim build links only its own provider: for every
// provider P, `go list -deps -tags provider_P ./cmd/machinist` must contain providers/P, no other
// providers/X package and no module only another provider needs (its cloud SDK); and the
// default build (no tags) must contain every provider. `make check-slim` runs it.
//
// A provider's SDK modules are known two ways: a small fixed map of well-known SDK prefixes,
// and, so that a new provider is covered without editing this file, the modules its packages
// import that nothing outside providers/ imports.
//
// Usage: go run ./build/checkslim [provider ...]   (default: every providers/<name>/register.go)
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

const module = "github.com/machinist-io/machinist"

// knownSDKs are module path prefixes of provider SDKs, kept even if the derivation below
// changes, so the best-known leaks are always caught.
var knownSDKs = map[string][]string{
	"openstack": {"github.com/gophercloud/"},
	"azure":     {"github.com/Azure/", "github.com/AzureAD/"},
}

// pkg is one package of a `go list -deps` result.
type pkg struct {
	path    string
	module  string
	imports []string
}

func main() {
	providers := os.Args[1:]
	if len(providers) == 0 {
		var err error
		if providers, err = discover(); err != nil {
			fail(err)
		}
	}
	if len(providers) == 0 {
		fail(fmt.Errorf("no providers found under providers/"))
	}
	sort.Strings(providers)

	// Modules imported outside providers/: shared by everyone, never an SDK leak.
	base, err := list(nil, "./core/...", "./grpcbridge/...", "./internal/...")
	if err != nil {
		fail(err)
	}
	baseModules := modules(base)
	own := map[string]map[string]bool{} // provider -> modules its packages need
	exclusive := map[string][]string{}  // provider -> modules only it needs
	for _, p := range providers {
		deps, err := list(nil, "./providers/"+p+"/...")
		if err != nil {
			fail(err)
		}
		own[p] = modules(deps)
		for m := range own[p] {
			if !baseModules[m] && m != module {
				exclusive[p] = append(exclusive[p], m)
			}
		}
		sort.Strings(exclusive[p])
	}

	failed := false
	for _, p := range providers {
		deps, err := list([]string{"provider_" + p}, "./cmd/machinist")
		if err != nil {
			fail(err)
		}
		problems := checkSlim(p, providers, deps, own[p], exclusive)
		if len(problems) > 0 {
			failed = true
			fmt.Printf("FAIL -tags provider_%s:\n", p)
			for _, prob := range problems {
				fmt.Printf("  %s\n", prob)
			}
			continue
		}
		fmt.Printf("ok   -tags provider_%s: %d packages; no other provider, no other provider's SDK\n", p, len(deps))
	}

	deps, err := list(nil, "./cmd/machinist")
	if err != nil {
		fail(err)
	}
	var missing []string
	for _, p := range providers {
		if _, ok := deps[module+"/providers/"+p]; !ok {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		failed = true
		fmt.Printf("FAIL default build lacks providers %v: run `make generate` (providers/all is stale)\n", missing)
	} else {
		fmt.Printf("ok   default build: every provider (%s)\n", strings.Join(providers, ", "))
	}
	// Test-only packages must not reach the product: `machinist dev` starts its control plane
	// through core/testenv/controlplane, never the testing.TB wrapper core/testenv.
	for _, testOnly := range []string{"testing", module + "/core/testenv", module + "/core/drivertest"} {
		if _, ok := deps[testOnly]; ok {
			failed = true
			fmt.Printf("FAIL the product binary links %s: %s\n", testOnly, chain(deps, testOnly))
		}
	}
	if failed {
		os.Exit(1)
	}
}

// checkSlim lists what is wrong with the slim build of provider p.
func checkSlim(p string, providers []string, deps map[string]pkg, ownModules map[string]bool, exclusive map[string][]string) []string {
	var problems []string
	if _, ok := deps[module+"/providers/"+p]; !ok {
		problems = append(problems, fmt.Sprintf("providers/%s is not linked in: run `make generate`", p))
	}
	forbidden := map[string]string{} // module or prefix -> provider it belongs to
	for _, x := range providers {
		if x == p {
			continue
		}
		for _, m := range exclusive[x] {
			if !ownModules[m] {
				forbidden[m] = x
			}
		}
		for _, prefix := range knownSDKs[x] {
			if !hasPrefix(ownModules, prefix) {
				forbidden[prefix] = x
			}
		}
	}
	paths := make([]string, 0, len(deps))
	for path := range deps {
		paths = append(paths, path)
	}
	sort.Strings(paths)
	reported := map[string]bool{}
	for _, path := range paths {
		d := deps[path]
		if rest, ok := strings.CutPrefix(path, module+"/providers/"); ok {
			x, _, _ := strings.Cut(rest, "/")
			if x != p && x != "all" {
				problems = append(problems, fmt.Sprintf("links provider package %s (via %s)", path, chain(deps, path)))
			}
			continue
		}
		if d.module == "" || reported[d.module] {
			continue
		}
		for key, x := range forbidden {
			if d.module == key || (strings.HasSuffix(key, "/") && strings.HasPrefix(d.module, key)) {
				reported[d.module] = true
				problems = append(problems, fmt.Sprintf("links module %s of provider %s (via %s)", d.module, x, chain(deps, path)))
				break
			}
		}
	}
	return problems
}

// chain returns an import path from cmd/machinist to target, to show how a leak got in.
func chain(deps map[string]pkg, target string) string {
	root := module + "/cmd/machinist"
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == target {
			var steps []string
			for s := cur; s != ""; s = prev[s] {
				steps = append(steps, strings.TrimPrefix(s, module+"/"))
			}
			slices.Reverse(steps)
			return strings.Join(steps, " -> ")
		}
		for _, imp := range deps[cur].imports {
			if _, seen := prev[imp]; !seen {
				prev[imp] = cur
				queue = append(queue, imp)
			}
		}
	}
	return "?"
}

// list runs go list -deps with the given tags and returns the packages by import path.
func list(tags []string, patterns ...string) (map[string]pkg, error) {
	args := []string{"list", "-deps", "-f", "{{.ImportPath}}\t{{with .Module}}{{.Path}}{{end}}\t{{join .Imports \" \"}}"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	args = append(args, patterns...)
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	deps := map[string]pkg{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) != 3 {
			continue
		}
		deps[fields[0]] = pkg{path: fields[0], module: fields[1], imports: strings.Fields(fields[2])}
	}
	return deps, sc.Err()
}

func modules(deps map[string]pkg) map[string]bool {
	out := map[string]bool{}
	for _, d := range deps {
		if d.module != "" {
			out[d.module] = true
		}
	}
	return out
}

func hasPrefix(set map[string]bool, prefix string) bool {
	for m := range set {
		if strings.HasPrefix(m, prefix) {
			return true
		}
	}
	return false
}

// discover returns the provider directories: providers/<name>/ holding a register.go.
func discover() ([]string, error) {
	matches, err := filepath.Glob("providers/*/register.go")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, m := range matches {
		names = append(names, filepath.Base(filepath.Dir(m)))
	}
	return names, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "checkslim:", err)
	os.Exit(2)
}
