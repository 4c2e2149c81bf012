package openstack

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
	"github.com/machinist-io/machinist/providers/openstack/fakeopenstack"
)

// benchScale maps a second of the real cloud to a millisecond of the benchmark.
const benchScale = time.Millisecond

// Nova's figures in seconds (docs/performance.md says where they come from): a boot stays in
// BUILD about 40 s, the first boot (OS, cloud-init, kubelet, join, image pulls) takes minutes;
// os-start powers on in about 10 s, an unshelve schedules and spawns in about 30 s, and the OS
// then boots again in about 30 s.
var novaTimes = struct{ build, firstBoot, start, unshelve, resume time.Duration }{
	build: 40 * benchScale, firstBoot: 120 * benchScale, start: 10 * benchScale, unshelve: 30 * benchScale, resume: 30 * benchScale,
}

// BenchmarkScaleUpToReady measures, through the driver and gophercloud against fakeopenstack
// with Nova's times scaled by benchScale, the time from a scale-up to a Ready node for a machine
// made from scratch (CreateMachine until ACTIVE, first-boot bootstrap) and for a standby machine
// resumed by StartMachine (os-start of a SHUTOFF server, or unshelve of a SHELVED_OFFLOADED one),
// in the same iteration, and reports both and their ratios.
func BenchmarkScaleUpToReady(b *testing.B) {
	cloud := startCloud(b, fakeopenstack.Options{})
	cloud.SetBuildTime(novaTimes.build)
	cloud.SetPowerTimes(fakeopenstack.PowerTimes{FirstBoot: novaTimes.firstBoot, Start: novaTimes.start, Unshelve: novaTimes.unshelve, Resume: novaTimes.resume})
	d, _ := testDriver(b)
	e := &benchEnv{b: b, cloud: cloud, d: d, secret: passwordSecret(cloud)}
	stop := testClass(b)
	shelve := stop.DeepCopy()
	shelve.Annotations = map[string]string{kit.StandbyModeAnnotation: modeShelve}
	var scratch, stopped, shelved time.Duration
	b.ResetTimer()
	for i := range b.N {
		scratch += e.fromScratch(stop, fmt.Sprintf("scratch-%d", i))
		stopped += e.fromStandby(stop, fmt.Sprintf("stopped-%d", i))
		shelved += e.fromStandby(shelve, fmt.Sprintf("shelved-%d", i))
	}
	n := float64(b.N)
	b.ReportMetric(float64(scratch.Nanoseconds())/n, "scratch-ns/op")
	b.ReportMetric(float64(stopped.Nanoseconds())/n, "standby-ns/op")
	b.ReportMetric(float64(shelved.Nanoseconds())/n, "shelved-ns/op")
	b.ReportMetric(float64(stopped)/float64(scratch), "standby/scratch")
	b.ReportMetric(float64(shelved)/float64(scratch), "shelved/scratch")
}

type benchEnv struct {
	b      *testing.B
	cloud  *fakeopenstack.Cloud
	d      *Driver
	secret *corev1.Secret
}

func (e *benchEnv) fromScratch(class *v1alpha1.MachineClass, name string) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	resp, err := e.d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine(name), MachineClass: class, Secret: e.secret})
	if err != nil {
		e.b.Fatalf("CreateMachine(%s): %v", name, err)
	}
	e.waitReady(ctx, resp.ProviderID)
	took := time.Since(began)
	e.delete(ctx, class, name)
	return took
}

// fromStandby makes machine name a standby one (created, booted once, stopped or shelved)
// untimed, then times StartMachine until its node would be Ready, and deletes it.
func (e *benchEnv) fromStandby(class *v1alpha1.MachineClass, name string) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := e.d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine(name), MachineClass: class, Secret: e.secret})
	if err != nil {
		e.b.Fatalf("CreateMachine(%s): %v", name, err)
	}
	e.waitReady(ctx, resp.ProviderID)
	if _, err := e.d.StopMachine(ctx, &driver.StopMachineRequest{Machine: machine(name), MachineClass: class, Secret: e.secret}); err != nil {
		e.b.Fatalf("StopMachine(%s): %v", name, err)
	}
	began := time.Now()
	started, err := e.d.StartMachine(ctx, &driver.StartMachineRequest{Machine: machine(name), MachineClass: class, Secret: e.secret})
	if err != nil {
		e.b.Fatalf("StartMachine(%s): %v", name, err)
	}
	e.waitReady(ctx, started.ProviderID)
	took := time.Since(began)
	e.delete(ctx, class, name)
	return took
}

func (e *benchEnv) waitReady(ctx context.Context, providerID string) {
	id, err := serverIDOf(providerID)
	if err != nil {
		e.b.Fatal(err)
	}
	if err := e.cloud.WaitReady(ctx, id); err != nil {
		e.b.Fatalf("server %s: %v", id, err)
	}
}

func (e *benchEnv) delete(ctx context.Context, class *v1alpha1.MachineClass, name string) {
	if _, err := e.d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: machine(name), MachineClass: class, Secret: e.secret}); err != nil {
		e.b.Fatalf("DeleteMachine(%s): %v", name, err)
	}
}
