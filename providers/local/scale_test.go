package local

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/eventually"
)

// TestScale proves one process holds many machines on the real API server: all nodes become
// Ready, their pods Running, every lease stays fresh (renewed within the grace period) through
// a steady period in which no pod is written, and the agents and the pod tracker use a fixed
// number of goroutines. It records what it measured (see docs/performance.md) but asserts only
// behaviour, never speed. MACHINIST_LOCAL_SCALE sets the number of machines (default 1000),
// MACHINIST_LOCAL_PODS the pods bound to each (default 1); -short skips it.
func TestScale(t *testing.T) {
	if testing.Short() {
		t.Skip("scale test: skipped with -short")
	}
	n := 1000
	if v := os.Getenv("MACHINIST_LOCAL_SCALE"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("MACHINIST_LOCAL_SCALE=%q: want a positive number", v)
		}
	}
	podsPerNode := 1
	if v := os.Getenv("MACHINIST_LOCAL_PODS"); v != "" {
		var err error
		if podsPerNode, err = strconv.Atoi(v); err != nil || podsPerNode < 0 {
			t.Fatalf("MACHINIST_LOCAL_PODS=%q: want a number", v)
		}
	}
	env := testenv.Start(t)
	cs := env.Clientset()
	ctx := context.Background()
	goroutinesBefore := runtime.NumGoroutine()

	d, err := newDriver(registry.Env{Target: env.Config, StateDir: t.TempDir()}, defaultWorkers, defaultSyncInterval)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	// Kubernetes' defaults: 10s heartbeat, 40s grace.
	c := class(t, "scale", map[string]any{"cluster": "scale"})

	start := time.Now()
	cpuStart := cpuTime()
	var wg sync.WaitGroup
	var failed atomic.Int32
	next := atomic.Int32{}
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > n {
					return
				}
				_, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine(fmt.Sprintf("scale-%04d", i)), MachineClass: c})
				if err != nil {
					failed.Add(1)
					t.Errorf("create %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.FailNow()
	}
	created := time.Since(start)
	eventually.Explained(t, 5*time.Minute, fmt.Sprintf("%d Ready nodes", n), func() (bool, string) {
		ready := readyNodes(t, cs)
		return ready == n, fmt.Sprintf("%d Ready", ready)
	})
	allReady := time.Since(start)
	cpuCreate := cpuTime() - cpuStart

	// Pods bound to the nodes (as the scheduler binds them), 32 creates at a time.
	podStart := time.Now()
	cpuPodStart := cpuTime()
	nextPod := atomic.Int32{}
	for range 32 {
		wg.Go(func() {
			for {
				i := int(nextPod.Add(1))
				if i > n*podsPerNode {
					return
				}
				p := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%05d", i), Namespace: "default"},
					Spec: corev1.PodSpec{NodeName: fmt.Sprintf("scale-%04d", 1+(i-1)%n),
						Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
				}
				if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
					failed.Add(1)
					t.Errorf("create pod %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.FailNow()
	}
	eventually.Explained(t, 5*time.Minute, fmt.Sprintf("%d Running pods", n*podsPerNode), func() (bool, string) {
		running := runningPods(t, cs)
		return running == n*podsPerNode, fmt.Sprintf("%d Running", running)
	})
	podsRunning := time.Since(podStart)
	cpuPods := cpuTime() - cpuPodStart
	goroutines := runtime.NumGoroutine() - goroutinesBefore

	// Steady state: three heartbeat intervals.
	reqStart := apiRequests(t, cs)
	podWritesStart := podWrites(t, cs)
	cpuSteadyStart := cpuTime()
	steady := 30 * time.Second
	deadline := time.Now().Add(steady)
	maxStale := time.Duration(0)
	for time.Now().Before(deadline) {
		time.Sleep(5 * time.Second)
		stale := oldestLease(t, cs)
		maxStale = max(maxStale, stale)
		if stale > DefaultNodeMonitorGracePeriod {
			t.Fatalf("a lease is %s old, past the %s grace period: heartbeats fall behind", stale, DefaultNodeMonitorGracePeriod)
		}
	}
	cpuSteady := cpuTime() - cpuSteadyStart
	reqs := apiRequests(t, cs) - reqStart
	if ready := readyNodes(t, cs); ready != n {
		t.Fatalf("%d of %d nodes Ready after the steady period", ready, n)
	}
	if w := podWrites(t, cs) - podWritesStart; w != 0 {
		t.Fatalf("%d pod writes in the steady period: a pod that looks right must not be written", w)
	}
	if running := runningPods(t, cs); running != n*podsPerNode {
		t.Fatalf("%d of %d pods Running after the steady period", running, n*podsPerNode)
	}
	if goroutines > 200 {
		t.Fatalf("%d goroutines for %d machines: the agents must share a scheduler", goroutines, n)
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)

	t.Logf("machines: %d on %d CPUs", n, runtime.NumCPU())
	t.Logf("create: all %d CreateMachine calls (32 at a time, nodes registered) in %s; all nodes Ready after %s; process CPU %s (%.1f ms/machine)",
		n, created.Round(time.Millisecond), allReady.Round(time.Millisecond), cpuCreate.Round(time.Millisecond), float64(cpuCreate.Milliseconds())/float64(n))
	t.Logf("pods: %d (%d per node) Running %s after their creates began; process CPU %s (%.2f ms/pod)",
		n*podsPerNode, podsPerNode, podsRunning.Round(time.Millisecond), cpuPods.Round(time.Millisecond), float64(cpuPods.Microseconds())/1000/float64(max(n*podsPerNode, 1)))
	t.Logf("steady %s: process CPU %s = %.1f%% of one core; API requests %.0f/s (%.2f per machine per 10s heartbeat); oldest lease seen %s",
		steady, cpuSteady.Round(time.Millisecond), 100*cpuSteady.Seconds()/steady.Seconds(), float64(reqs)/steady.Seconds(),
		float64(reqs)/float64(n)/(steady.Seconds()/10), maxStale.Round(time.Millisecond))
	t.Logf("goroutines added: %d; heap in use after GC: %.1f MiB", goroutines, float64(ms.HeapInuse)/(1<<20))
}

func readyNodes(t testing.TB, cs kubernetes.Interface) int {
	nodes, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Logf("list nodes: %v", err)
		return 0
	}
	ready := 0
	for _, n := range nodes.Items {
		if c := findCondition(n.Status.Conditions, corev1.NodeReady); c != nil && c.Status == corev1.ConditionTrue {
			ready++
		}
	}
	return ready
}

func oldestLease(t testing.TB, cs kubernetes.Interface) time.Duration {
	leases, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list leases: %v", err)
	}
	oldest := time.Duration(0)
	for _, l := range leases.Items {
		if l.Spec.RenewTime != nil {
			oldest = max(oldest, time.Since(l.Spec.RenewTime.Time))
		}
	}
	return oldest
}

func runningPods(t testing.TB, cs kubernetes.Interface) int {
	pods, err := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{FieldSelector: "status.phase=Running"})
	if err != nil {
		t.Logf("list pods: %v", err)
		return 0
	}
	return len(pods.Items)
}

// podWrites sums the API server's pod write requests (status updates, deletes).
func podWrites(t testing.TB, cs kubernetes.Interface) int64 {
	return requestTotal(t, cs, func(line string) bool {
		return strings.Contains(line, `resource="pods"`) && !strings.Contains(line, `verb="GET"`) &&
			!strings.Contains(line, `verb="LIST"`) && !strings.Contains(line, `verb="WATCH"`) && !strings.Contains(line, `verb="POST"`)
	})
}

// apiRequests sums apiserver_request_total for nodes, leases and pods from the API server's
// metrics (the test's own few LISTs included).
func apiRequests(t testing.TB, cs kubernetes.Interface) int64 {
	return requestTotal(t, cs, func(line string) bool {
		return strings.Contains(line, `resource="nodes"`) || strings.Contains(line, `resource="leases"`) || strings.Contains(line, `resource="pods"`)
	})
}

// requestTotal sums the apiserver_request_total series whose line matches.
func requestTotal(t testing.TB, cs kubernetes.Interface, match func(string) bool) int64 {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	var total int64
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		if !match(line) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err == nil {
			total += int64(v)
		}
	}
	return total
}

// cpuTime is the user+system CPU time of this process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
