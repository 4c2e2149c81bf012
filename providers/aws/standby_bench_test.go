package aws

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/aws/fakeaws"
)

// benchScale maps a second of the real cloud to a millisecond of the benchmark.
const benchScale = time.Millisecond

// EC2's figures in seconds (docs/performance.md says where they come from): a launch is pending
// about 30 s; the first boot (OS, cloud-init, kubelet, join, image pulls) takes minutes; a start
// is pending about 15 s and the OS boots again in about 30 s (a hibernated one resumes in 10 s).
var ec2Delays = struct{ launch, firstBoot, start, resume, resumeHibernated time.Duration }{
	launch: 30 * benchScale, firstBoot: 120 * benchScale, start: 15 * benchScale, resume: 30 * benchScale, resumeHibernated: 10 * benchScale,
}

// BenchmarkScaleUpToReady measures, through the driver and the SDK against fakeaws with EC2's
// delays scaled by benchScale, the time from a scale-up to a Ready node for a machine made from
// scratch (CreateMachine, boot, first-boot bootstrap) and for a standby machine resumed by
// StartMachine (stopped plainly, or hibernated), in the same iteration, and reports both and
// their ratio.
func BenchmarkScaleUpToReady(b *testing.B) {
	e := newTestEnv(b)
	e.cloud.SetStartDelay(ec2Delays.launch)
	e.cloud.SetBootDelays(fakeaws.BootDelays{
		FirstBoot: ec2Delays.firstBoot, Starting: ec2Delays.start, Resume: ec2Delays.resume, ResumeHibernated: ec2Delays.resumeHibernated,
	})
	plain, hibernating := e.class, annotated(e.class, modeHibernate)
	var scratch, stopped, hibernated time.Duration
	b.ResetTimer()
	for i := range b.N {
		scratch += e.fromScratch(b, plain, fmt.Sprintf("scratch-%d", i))
		stopped += e.fromStandby(b, plain, fmt.Sprintf("stopped-%d", i))
		hibernated += e.fromStandby(b, hibernating, fmt.Sprintf("hibernated-%d", i))
	}
	n := float64(b.N)
	b.ReportMetric(float64(scratch.Nanoseconds())/n, "scratch-ns/op")
	b.ReportMetric(float64(stopped.Nanoseconds())/n, "standby-ns/op")
	b.ReportMetric(float64(hibernated.Nanoseconds())/n, "hibernated-ns/op")
	b.ReportMetric(float64(stopped)/float64(scratch), "standby/scratch")
	b.ReportMetric(float64(hibernated)/float64(scratch), "hibernated/scratch")
}

// fromScratch creates machine name and waits until its node would be Ready; it returns that
// time and deletes the machine.
func (e *testEnv) fromScratch(b *testing.B, class *v1alpha1.MachineClass, name string) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	if _, err := e.createIn(ctx, class, machine(name)); err != nil {
		b.Fatalf("CreateMachine(%s): %v", name, err)
	}
	e.waitReady(b, ctx, name)
	took := time.Since(began)
	e.benchDelete(b, class, name)
	return took
}

// fromStandby makes machine name a standby one (created, booted once, stopped) untimed, then
// times StartMachine until its node would be Ready, and deletes it.
func (e *testEnv) fromStandby(b *testing.B, class *v1alpha1.MachineClass, name string) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := e.createIn(ctx, class, machine(name)); err != nil {
		b.Fatalf("CreateMachine(%s): %v", name, err)
	}
	e.waitReady(b, ctx, name)
	if _, err := e.drv.StopMachine(ctx, &driver.StopMachineRequest{Machine: machine(name), MachineClass: class, Secret: e.secret}); err != nil {
		b.Fatalf("StopMachine(%s): %v", name, err)
	}
	began := time.Now()
	if _, err := e.drv.StartMachine(ctx, &driver.StartMachineRequest{Machine: machine(name), MachineClass: class, Secret: e.secret}); err != nil {
		b.Fatalf("StartMachine(%s): %v", name, err)
	}
	e.waitReady(b, ctx, name)
	took := time.Since(began)
	e.benchDelete(b, class, name)
	return took
}

func (e *testEnv) waitReady(b *testing.B, ctx context.Context, name string) {
	live := e.liveOf(name)
	if len(live) != 1 {
		b.Fatalf("machine %s has %d live instances; want 1", name, len(live))
	}
	if err := e.cloud.WaitReady(ctx, live[0].ID); err != nil {
		b.Fatalf("machine %s: %v", name, err)
	}
}

func (e *testEnv) benchDelete(b *testing.B, class *v1alpha1.MachineClass, name string) {
	if err := e.delete(b, class, machine(name)); err != nil {
		b.Fatalf("DeleteMachine(%s): %v", name, err)
	}
}
