package memdriver_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
)

// BenchmarkLifecycle measures create+status+delete of one machine in a cloud that already holds
// `vms` other machines, the size of controller scale tests.
func BenchmarkLifecycle(b *testing.B) {
	for _, vms := range []int{10, 1000} {
		b.Run(fmt.Sprintf("vms=%d", vms), func(b *testing.B) {
			cloud := memdriver.NewCloud()
			for i := range vms {
				cloud.Add(memdriver.VM{MachineName: fmt.Sprintf("bg-%d", i), Cluster: "a", Role: "worker", Size: "small"})
			}
			d := memdriver.New(cloud)
			var seq atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					m := machine(fmt.Sprintf("m-%d", seq.Add(1)))
					ctx := b.Context()
					if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: workers}); err != nil {
						b.Fatal(err)
					}
					if _, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: workers}); err != nil {
						b.Fatal(err)
					}
					if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: m, MachineClass: workers}); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
