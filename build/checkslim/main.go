// Command checkslim proves what each binary of cmd/machinist links, with `go list -deps`:
//
//   - each slim provider binary (-tags slim,provider_P) links providers/P, the driver server and
//     the dial-in client, and none of notInSlim (controllers, controller-runtime, the autoscaler
//     server, the control plane, client-go's clientset), no other providers/X package and no
//     module only another provider needs (its cloud SDK);
//   - each provider-half binary (-tags slim,machinecontroller,provider_P: MCM's
//     machine-controller for P, the provider image's /machine-controller) links the same
//     provider and the controllers, and no other provider or its SDK, no autoscaler server,
//     control plane or fake cloud; it is not slim: it needs controller-runtime and client-go;
//   - a full build with one provider (-tags provider_P) still has the controllers;
//   - the default build (no tags) has every provider and the controllers, and no test-only
//     package.
//
// A provider's SDK modules are known two ways: a small fixed map of well-known SDK prefixes,
// and, so that a new provider is covered without editing this file, the modules its packages
// import that nothing outside providers/ imports.
//
// With -sizes it also builds every binary as the images do (static, -trimpath, stripped) and
// fails when a slim binary is larger than -max-percent of the all-in-one, or a provider-half
// binary larger than -max-half-percent (a coarse bound against growth: the controllers a
// provider half must link are most of the all-in-one, 78–84 % measured with five providers;
// what it must not link is proven with go list -deps above).
//
// Usage: go run ./build/checkslim [-tags extra,tags] [-sizes [-max-percent 40] [-max-half-percent 90]] [provider ...]
// (default: every providers/<name>/register.go). `make check-slim` and `make slim-sizes` run it.
package main

import (
	"bufio"
	"bytes"
	"flag"
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
	"aws":       {"github.com/aws/"},
	"gcp":       {"google.golang.org/api", "cloud.google.com/go/", "github.com/googleapis/"},
}

// rule is an import path (and everything under it, unless exact) with the reason it is refused
// or required.
type rule struct {
	path, why string
	exact     bool
}

// notInSlim is what a slim provider binary must not link.
var notInSlim = []rule{
	{"sigs.k8s.io/controller-runtime", "controller-runtime belongs to the controllers (run, dev)", false},
	{module + "/core/controller", "the controllers belong to run and dev", false},
	{module + "/grpcbridge/autoscaler", "the Cluster Autoscaler server belongs to autoscaler", false},
	{module + "/harness/localcontrolplane", "the local control plane belongs to dev and controlplane", false},
	{"k8s.io/apiextensions-apiserver", "CRD types belong to the controllers and the control plane", false},
	{"k8s.io/client-go/kubernetes", "client-go's clientset registers every API group (~20 MB stripped): use internal/kubeclient", false},
	{"k8s.io/client-go/applyconfigurations", "apply configurations of every API type come with client-go's typed clients: use internal/kubeclient", false},
	{"k8s.io/client-go/informers", "shared informers of every API group come with the clientset", false},
	{"testing", "test-only", false},
}

// onlyForItsProvider is what a slim binary links only when its own provider's packages need it
// (the local provider joins nodes with client-go): the shared packages a provider sidecar uses
// (registry, bridge, cloudmetrics) must not bring them. Each is a megabyte or so of a cloud
// provider's sidecar.
var onlyForItsProvider = []rule{
	{"k8s.io/client-go", "a Kubernetes client: registry.Env.Target is untyped so that only a provider that joins nodes links one", false},
	{"github.com/prometheus", "metrics are served by the controller; core/cloudmetrics records without Prometheus (cloudmetricsprom exposes it)", false},
}

// inSlim is what a slim provider binary must link, besides its provider: serve, connect, driver.
var inSlim = []rule{
	{module + "/core/registry", "the provider registry", false},
	{module + "/grpcbridge", "the driver server (serve) and client (driver --endpoint)", false},
	{module + "/grpcbridge/dialin", "the dial-in client (connect)", false},
}

// inProviderHalf is what a provider-half build (-tags slim,machinecontroller,provider_P, the
// provider image's /machine-controller) must link besides its provider: the controllers, and
// the slim subcommands' driver server and dial-in client.
var inProviderHalf = append([]rule{
	{module + "/core/controller/manager", "the controller manager (machine-controller)", false},
	{module + "/core/controller/machine", "the Machine controller (MCM's provider half)", false},
	{"sigs.k8s.io/controller-runtime", "the controllers run on controller-runtime", false},
}, inSlim...)

// notInProviderHalf is what a provider-half build must not link: what only the all-in-one's other
// subcommands need (its fake clouds are refused by fakePackages).
var notInProviderHalf = []rule{
	{module + "/grpcbridge/autoscaler", "the Cluster Autoscaler server belongs to autoscaler", false},
	{module + "/harness/testenv", "the local control plane belongs to dev and controlplane", false},
	{"testing", "test-only", false},
	{module + "/core/drivertest", "the conformance kit is test-only", false},
}

// fakePackages lists the providers' fake clouds (providers/<name>/fake<name>) deps holds: only
// `machinist fakecloud`, which no slim build has, serves them.
func fakePackages(deps map[string]pkg) []string {
	var problems []string
	for path := range deps {
		rest, ok := strings.CutPrefix(path, module+"/providers/")
		if !ok {
			continue
		}
		for _, part := range strings.Split(rest, "/")[1:] {
			if strings.HasPrefix(part, "fake") {
				problems = append(problems, fmt.Sprintf("links fake cloud %s (fakecloud, not in slim builds, serves it): %s", path, chain(deps, path)))
				break
			}
		}
	}
	sort.Strings(problems)
	return problems
}

// inFull is what every non-slim build must link: the controllers and the autoscaler server.
var inFull = []rule{
	{module + "/core/controller/manager", "the controller manager (run)", false},
	{module + "/grpcbridge/autoscaler", "the Cluster Autoscaler server (autoscaler)", false},
}

// testOnly must reach no binary.
var testOnly = []rule{
	{"testing", "test-only", false},
	{module + "/harness/testenv", "it wraps testing.TB; dev and controlplane use harness/localcontrolplane", false},
	{module + "/core/drivertest", "the conformance kit is test-only", false},
}

// pkg is one package of a `go list -deps` result.
type pkg struct {
	path    string
	module  string
	imports []string
}

func main() {
	extraTags := flag.String("tags", "", "extra build tags of every build, comma-separated (the Makefile's BUILD_TAGS)")
	sizes := flag.Bool("sizes", false, "also build stripped static binaries and compare their sizes")
	maxPercent := flag.Float64("max-percent", 40, "with -sizes: the largest a slim binary may be, in percent of the all-in-one")
	maxHalfPercent := flag.Float64("max-half-percent", 90, "with -sizes: the largest a provider-half binary (machine-controller-<provider>) may be, in percent of the all-in-one")
	flag.Parse()
	extra := splitTags(*extraTags)
	providers := flag.Args()
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
	report := func(build string, problems []string, ok string) {
		if len(problems) > 0 {
			failed = true
			fmt.Printf("FAIL %s:\n", build)
			for _, prob := range problems {
				fmt.Printf("  %s\n", prob)
			}
			return
		}
		fmt.Printf("ok   %s: %s\n", build, ok)
	}

	for _, p := range providers {
		tags := append([]string{"slim", "provider_" + p}, extra...)
		deps, err := list(tags, "./cmd/machinist")
		if err != nil {
			fail(err)
		}
		problems := checkSlim(p, providers, deps, own[p], exclusive)
		problems = append(problems, refused(deps, notInSlim)...)
		problems = append(problems, refused(deps, notNeeded(onlyForItsProvider, own[p]))...)
		problems = append(problems, missing(deps, inSlim)...)
		report("-tags "+strings.Join(tags, ","), problems, fmt.Sprintf(
			"%d packages; no controllers, controller-runtime, autoscaler server or clientset; no other provider or its SDK", len(deps)))

		// The provider half: the same provider, plus the controllers.
		tags = append([]string{"slim", "machinecontroller", "provider_" + p}, extra...)
		if deps, err = list(tags, "./cmd/machinist"); err != nil {
			fail(err)
		}
		problems = checkSlim(p, providers, deps, own[p], exclusive)
		problems = append(problems, refused(deps, notInProviderHalf)...)
		problems = append(problems, fakePackages(deps)...)
		problems = append(problems, missing(deps, inProviderHalf)...)
		report("-tags "+strings.Join(tags, ","), problems, fmt.Sprintf(
			"%d packages; the controllers; no autoscaler server, control plane or fake cloud; no other provider or its SDK", len(deps)))
	}

	// Without slim, one provider still makes a full binary.
	oneTags := append([]string{"provider_" + providers[0]}, extra...)
	deps, err := list(oneTags, "./cmd/machinist")
	if err != nil {
		fail(err)
	}
	report("-tags "+strings.Join(oneTags, ","), append(missing(deps, inFull), refused(deps, testOnly)...),
		fmt.Sprintf("%d packages; a full binary with the controllers and the autoscaler server", len(deps)))

	deps, err = list(extra, "./cmd/machinist")
	if err != nil {
		fail(err)
	}
	var problems []string
	var lacking []string
	for _, p := range providers {
		if _, ok := deps[module+"/providers/"+p]; !ok {
			lacking = append(lacking, p)
		}
	}
	if len(lacking) > 0 {
		problems = append(problems, fmt.Sprintf("lacks providers %v: run `make generate` (providers/all is stale)", lacking))
	}
	problems = append(problems, missing(deps, inFull)...)
	problems = append(problems, refused(deps, testOnly)...)
	report("default build", problems, fmt.Sprintf("%d packages; every provider (%s), the controllers and the autoscaler server",
		len(deps), strings.Join(providers, ", ")))

	if *sizes && !failed {
		if !compareSizes(providers, extra, *maxPercent, *maxHalfPercent) {
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// notNeeded returns the rules that match none of a provider's own modules.
func notNeeded(rules []rule, own map[string]bool) []rule {
	var out []rule
	for _, r := range rules {
		needed := false
		for m := range own {
			needed = needed || r.matches(m)
		}
		if !needed {
			out = append(out, r)
		}
	}
	return out
}

// refused lists the packages of deps that rules refuse, each with how it got in.
func refused(deps map[string]pkg, rules []rule) []string {
	var problems []string
	for _, r := range rules {
		var hits []string
		for path := range deps {
			if r.matches(path) {
				hits = append(hits, path)
			}
		}
		if len(hits) == 0 {
			continue
		}
		sort.Strings(hits)
		// The shortest chain to any hit shows where the dependency enters.
		best := ""
		for _, h := range hits {
			if c := chain(deps, h); best == "" || strings.Count(c, "->") < strings.Count(best, "->") {
				best = c
			}
		}
		problems = append(problems, fmt.Sprintf("links %s (%d packages; %s): %s", r.path, len(hits), r.why, best))
	}
	return problems
}

// missing lists the rules of which deps holds no package.
func missing(deps map[string]pkg, rules []rule) []string {
	var problems []string
	for _, r := range rules {
		found := false
		for path := range deps {
			if r.matches(path) {
				found = true
				break
			}
		}
		if !found {
			problems = append(problems, fmt.Sprintf("does not link %s (%s)", r.path, r.why))
		}
	}
	return problems
}

// matches reports whether path is the rule's package or, unless exact, a package below it.
func (r rule) matches(path string) bool {
	return path == r.path || (!r.exact && strings.HasPrefix(path, r.path+"/"))
}

func splitTags(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
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
			// providers/kit is what every cloud provider is built on; its fakes and oracles are not.
			if x != p && x != "all" && rest != "kit" {
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
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
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
