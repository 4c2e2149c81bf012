//go:build !slim

package main

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/machinist-io/machinist/internal/gardenerseed"
)

func TestEntrypointArgs(t *testing.T) {
	for _, tc := range []struct {
		argv0, want string // want: the subcommand inserted, "" for none
	}{
		{"./machine-controller-manager", "machine-controller-manager"},
		{"/machine-controller-manager", "machine-controller-manager"},
		{"bin/machine-controller-manager", "machine-controller-manager"},
		{"/machine-controller", "machine-controller"},
		{"bin/machine-controller-local", "machine-controller"},
		{"machine-controller-openstack", "machine-controller"},
		{"/usr/local/bin/machinist", ""},
		{"bin/machinist-local", ""},
		{"machine-controller-manager-provider-aws", "machine-controller"}, // MCM's sidecar container name, if a binary is named so
	} {
		got := entrypointArgs([]string{tc.argv0, "--namespace=a"})
		want := []string{tc.argv0, "--namespace=a"}
		if tc.want != "" {
			want = []string{tc.argv0, tc.want, "--namespace=a"}
		}
		if !slices.Equal(got, want) {
			t.Errorf("entrypointArgs(%s …) = %q, want %q", tc.argv0, got, want)
		}
	}
}

// runLogged runs the CLI as main does (entrypointArgs first) and returns what it logged and
// the error.
func runLogged(t *testing.T, argv ...string) (string, error) {
	t.Helper()
	var stderr bytes.Buffer
	err := newApp(&bytes.Buffer{}, &stderr).RunContext(context.Background(), entrypointArgs(argv))
	return stderr.String(), err
}

// ignoredIn returns the flags a log names as ignored.
func ignoredIn(log string) []string {
	var flags []string
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), `msg="ignoring flag `); ok {
			flag, _, _ := strings.Cut(rest, `"`)
			flags = append(flags, flag)
		}
	}
	return flags
}

// TestGardenerCommandLinesParse runs Gardener's command lines for MCM's two containers as they
// are, outside a pod: each parses, and fails only where it reads the in-cluster config
// (--control-kubeconfig=inClusterConfig), naming it. Today's lines leave no flag ignored; the
// core's line before April 2023 has the provider half's safety flags and
// --delete-migrated-machine-class, each logged once as ignored.
func TestGardenerCommandLinesParse(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	const ns = "shoot--foo--bar"
	for _, tc := range []struct {
		name    string
		argv    []string
		ignored []string
	}{
		{"core", gardenerseed.CoreCommand(ns), nil},
		{"provider sidecar", append([]string{"/machine-controller"}, gardenerseed.ProviderSidecarArgs(ns)...), nil},
		{"core before 2023", gardenerseed.CoreCommandBefore2023(ns), []string{"--delete-migrated-machine-class",
			"--machine-safety-orphan-vms-period", "--machine-safety-apiserver-statuscheck-period", "--machine-safety-apiserver-statuscheck-timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, err := runLogged(t, tc.argv...)
			if err == nil || !strings.Contains(err.Error(), "--control-kubeconfig") || !strings.Contains(err.Error(), "inClusterConfig: not running in a pod") {
				t.Fatalf("error %v, want one about the in-cluster config; log:\n%s", err, log)
			}
			if got := ignoredIn(log); !sameSet(got, tc.ignored) {
				t.Errorf("ignored flags %q, want %q; log:\n%s", got, tc.ignored, log)
			}
		})
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// mcmFlagValues are values of MCM's flags that pass machinist's and MCM's checks; other flags
// get one by their type.
var mcmFlagValues = map[string]string{
	"control-kubeconfig":                           "/nonexistent/kubeconfig",
	"target-kubeconfig":                            "none",
	"address":                                      "127.0.0.1",
	"port":                                         "10258",
	"leader-elect-resource-lock":                   "leases",
	"leader-elect-lease-duration":                  "15s",
	"leader-elect-renew-deadline":                  "10s",
	"leader-elect-retry-period":                    "2s",
	"machine-safety-apiserver-statuscheck-period":  "1m",
	"machine-safety-apiserver-statuscheck-timeout": "30s",
	"kube-api-content-type":                        "application/vnd.kubernetes.protobuf",
	"node-conditions":                              "KernelDeadlock,ReadonlyFilesystem",
	"namespace":                                    "shoot--foo--bar",
	"vmodule":                                      "controller*=5",
}

var mcmTypeValues = map[string]string{
	"bool": "true", "duration": "2m", "int32": "7", "float32": "15", "string": "x", "ip": "127.0.0.1",
}

// TestEveryMCMFlagIsAccepted gives each of MCM's programs' subcommands every flag that program
// defines (testdata/mcm-flags.txt, recorded from gardener/machine-controller-manager at
// 54caf546e0f4), in both forms pflag parses, --flag=value and --flag value: all are accepted
// (the run fails later, reading the kubeconfig), the ones machinist does not act on are logged
// once each as ignored, and --v after the subcommand sets the verbosity.
func TestEveryMCMFlagIsAccepted(t *testing.T) {
	data, err := os.ReadFile("testdata/mcm-flags.txt")
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string][][2]string{} // program -> name, type
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("testdata/mcm-flags.txt: %q: want program, flag and type", line)
		}
		flags[f[0]] = append(flags[f[0]], [2]string{f[1], f[2]})
	}
	if len(flags["machine-controller-manager"]) < 20 || len(flags["machine-controller"]) < 30 {
		t.Fatalf("testdata/mcm-flags.txt has %d and %d flags, want MCM's whole lists", len(flags["machine-controller-manager"]), len(flags["machine-controller"]))
	}
	t.Cleanup(func() {
		runtime.SetBlockProfileRate(0) // --contention-profiling turned it on
		_ = setupLogging(os.Stderr, 0, "text")
	})
	for program, list := range flags {
		for _, form := range []string{"--flag=value", "--flag value"} {
			t.Run(program+" "+form, func(t *testing.T) {
				argv := []string{"/" + program}
				for _, f := range list {
					value, ok := mcmFlagValues[f[0]]
					if !ok {
						if value, ok = mcmTypeValues[f[1]]; !ok {
							t.Fatalf("flag --%s of type %s: no test value for the type", f[0], f[1])
						}
					}
					if f[0] == "v" {
						value = "3"
					}
					switch {
					case f[1] == "bool":
						argv = append(argv, "--"+f[0]+"=true") // pflag takes no separate value for a bool
					case form == "--flag=value":
						argv = append(argv, "--"+f[0]+"="+value)
					default:
						argv = append(argv, "--"+f[0], value)
					}
				}
				_ = setupLogging(os.Stderr, 0, "text")
				log, err := runLogged(t, argv...)
				if err == nil || !strings.Contains(err.Error(), "/nonexistent/kubeconfig") {
					t.Fatalf("%s: error %v, want one reading /nonexistent/kubeconfig (after the flags parsed); log:\n%s", strings.Join(argv, " "), err, log)
				}
				want := []string{"--cloud-provider", "--kube-api-content-type", "--controller-start-interval", "--vmodule", "--log-flush-frequency"}
				if got := ignoredIn(log); !sameSet(got, want) {
					t.Errorf("ignored flags %q, want %q; log:\n%s", got, want, log)
				}
				if !slog.Default().Enabled(context.Background(), slog.LevelDebug) {
					t.Error("--v=3 after the subcommand did not turn on debug logs")
				}
			})
		}
	}
}

// TestHalvesRefuseWhatMCMRefuses: a flag machinist would have to guess about is an error
// naming it, as in MCM.
func TestHalvesRefuseWhatMCMRefuses(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"machine-controller-manager", "--contention-profiling"}, "--contention-profiling needs --profiling"},
		{[]string{"machine-controller-manager", "--concurrent-syncs=5", "--set-concurrent-syncs=6"}, "give one"},
		{[]string{"machine-controller-manager", "--concurrent-syncs=0"}, "--concurrent-syncs 0"},
		{[]string{"machine-controller", "--no-such-flag=1"}, "no-such-flag"},
		{[]string{"machinist", "run", "--contention-profiling"}, "--contention-profiling needs --profiling"},
	} {
		log, err := runLogged(t, append(tc.argv, "--control-kubeconfig=/nonexistent/kubeconfig")...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one naming %q; log:\n%s", tc.argv, err, tc.want, log)
		}
	}
}

// TestRunTakesMCMFlags: `machinist run`, the two halves in one process, takes MCM's flags too,
// with --v after the subcommand; none of run's own flags is ignored there.
func TestRunTakesMCMFlags(t *testing.T) {
	t.Cleanup(func() { _ = setupLogging(os.Stderr, 0, "text") })
	_ = setupLogging(os.Stderr, 0, "text")
	argv := append([]string{"machinist", "run"}, gardenerseed.CoreCommandBefore2023("shoot--foo--bar")[1:]...)
	argv = append(argv, "--control-kubeconfig=/nonexistent/kubeconfig", "--machine-creation-timeout=20m", "--cloud-provider=aws")
	log, err := runLogged(t, argv...)
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/kubeconfig") {
		t.Fatalf("error %v, want one reading the kubeconfig; log:\n%s", err, log)
	}
	if got, want := ignoredIn(log), []string{"--cloud-provider", "--delete-migrated-machine-class"}; !sameSet(got, want) {
		t.Errorf("ignored flags %q, want %q", got, want)
	}
	if !slog.Default().Enabled(context.Background(), slog.LevelDebug) {
		t.Error("--v=3 after run did not turn on debug logs")
	}
}
