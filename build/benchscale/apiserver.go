package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

func benchClass() *v1alpha1.MachineClass {
	return &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Namespace: "default", Name: "bench"},
		Provider:     "local",
		ProviderSpec: kruntime.RawExtension{Raw: []byte(`{"cluster":"bench"}`)},
		SecretRef:    &corev1.SecretReference{Namespace: "default", Name: "bench"},
	}
}

func createClass(ctx context.Context, c client.Client) error {
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bench"}, StringData: map[string]string{"userData": "#cloud-config\n"}}); err != nil {
		return err
	}
	return c.Create(ctx, benchClass())
}

// deploymentNames are the benchmark's MachineDeployments: "bench", or bench-000 … for several.
func deploymentNames(deployments int) []string {
	if deployments <= 1 {
		return []string{"bench"}
	}
	names := make([]string, deployments)
	for i := range names {
		names[i] = fmt.Sprintf("bench-%03d", i)
	}
	return names
}

// createDeployments creates the benchmark's MachineDeployments, n machines in all, shared
// evenly (parseSizes checks that n divides).
func createDeployments(ctx context.Context, c client.Client, n, deployments int) error {
	names := deploymentNames(deployments)
	for _, name := range names {
		if err := createDeployment(ctx, c, name, n/len(names)); err != nil {
			return err
		}
	}
	return nil
}

func createDeployment(ctx context.Context, c client.Client, name string, n int) error {
	surge, unavailable := intstr.FromInt(1), intstr.FromInt(0)
	return c.Create(ctx, &v1alpha1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: v1alpha1.MachineDeploymentSpec{
			Replicas: int32(n),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": name}},
			Strategy: v1alpha1.MachineDeploymentStrategy{RollingUpdate: &v1alpha1.RollingUpdateMachineDeployment{
				UpdateConfiguration: v1alpha1.UpdateConfiguration{MaxSurge: &surge, MaxUnavailable: &unavailable}}},
			Template: v1alpha1.MachineTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"pool": name}},
				Spec:       v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: "bench"}},
			},
		},
	})
}

// scaleDeployments sets every benchmark deployment's replicas, as `kubectl scale` does.
func scaleDeployments(ctx context.Context, c client.Client, deployments, replicas int) error {
	for _, name := range deploymentNames(deployments) {
		d := &v1alpha1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
		patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
		if err := c.Patch(ctx, d, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			return fmt.Errorf("scale MachineDeployment %s to %d: %w", name, replicas, err)
		}
	}
	return nil
}

// requestCounts reads apiserver_request_total from kube-apiserver's /metrics, summed by
// "resource verb" (resource with its subresource).
func requestCounts(ctx context.Context, cfg *rest.Config) (map[string]float64, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return counterSums(ctx, hc, strings.TrimSuffix(cfg.Host, "/")+"/metrics", "apiserver_request_total", func(labels map[string]string) string {
		res := labels["resource"]
		if sub := labels["subresource"]; sub != "" {
			res += "/" + sub
		}
		if res == "" {
			res = "(non-resource)"
		}
		return res + " " + labels["verb"]
	})
}

// reconcileCounts reads controller_runtime_reconcile_total from the controller's /metrics,
// summed by controller and result (success, requeue, requeue_after, error): how many reconciles
// a phase cost and why, counts the machine's load does not blur as it blurs CPU time.
func reconcileCounts(ctx context.Context, port int) (map[string]float64, error) {
	return counterSums(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), "controller_runtime_reconcile_total",
		func(labels map[string]string) string { return labels["controller"] + " " + labels["result"] })
}

// counterSums reads a Prometheus text exposition and sums the samples of one counter by the key
// its labels give.
func counterSums(ctx context.Context, hc *http.Client, url, metric string, key func(labels map[string]string) string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read metrics %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read metrics %s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	prefix := metric + "{"
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		end := strings.LastIndex(line, "}")
		v, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err != nil {
			continue
		}
		out[key(parseLabels(line[len(prefix):end]))] += v
	}
	return out, sc.Err()
}

func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		eq := strings.Index(s, "=\"")
		if eq < 0 {
			break
		}
		key := s[:eq]
		rest := s[eq+2:]
		end := strings.Index(rest, "\"")
		if end < 0 {
			break
		}
		out[key] = rest[:end]
		s = strings.TrimPrefix(rest[end+1:], ",")
	}
	return out
}

// deletedPattern reads the machine count of a MachineSet's SuccessfulDelete note.
var deletedPattern = regexp.MustCompile(`^Deleted (\d+) machines?: `)

// deleteEvents counts the SuccessfulDelete events stored for the benchmark's MachineSets and the
// machines they say were deleted: every deleted machine should be in one.
func deleteEvents(ctx context.Context, c client.Client) (events, machines int, err error) {
	var list eventsv1.EventList
	if err := c.List(ctx, &list, client.InNamespace("default")); err != nil {
		return 0, 0, fmt.Errorf("list events: %w", err)
	}
	for _, ev := range list.Items {
		if ev.Reason != "SuccessfulDelete" || ev.Regarding.Kind != "MachineSet" {
			continue
		}
		events++
		if m := deletedPattern.FindStringSubmatch(ev.Note); m != nil {
			n, _ := strconv.Atoi(m[1])
			count := int32(1)
			if ev.Series != nil {
				count = ev.Series.Count // an identical note repeated (not expected: names differ)
			}
			machines += n * int(count)
		}
	}
	return events, machines, nil
}

// oldestLease returns how long ago the least recently renewed Lease of an existing node (node
// tells) was renewed: what a node lifecycle controller compares with its grace period
// (kube-controller-manager's 50 s default; kubelet's Lease lasts 40 s) before it marks the node
// Unknown. The Lease of a node already deleted does not count: nothing renews it any more.
func oldestLease(ctx context.Context, c client.Client, node func(name string) bool) (time.Duration, error) {
	var list coordinationv1.LeaseList
	if err := c.List(ctx, &list, client.InNamespace(corev1.NamespaceNodeLease)); err != nil {
		return 0, fmt.Errorf("list node leases: %w", err)
	}
	now := time.Now()
	var oldest time.Duration
	for _, l := range list.Items {
		if l.Spec.RenewTime != nil && node(l.Name) {
			oldest = max(oldest, now.Sub(l.Spec.RenewTime.Time))
		}
	}
	return oldest, nil
}
