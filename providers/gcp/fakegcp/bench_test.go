package fakegcp

import (
	"fmt"
	"testing"

	compute "google.golang.org/api/compute/v1"
)

// BenchmarkRequests: what checking requests and answers against the Compute contract costs the
// fake, an insert, a get, a list of 50 instances and a delete per op, with the contract and
// without (compare the two as a ratio in one run).
func BenchmarkRequests(b *testing.B) {
	for _, mode := range []string{"contract", "unchecked"} {
		b.Run(mode, func(b *testing.B) {
			c := New(Options{})
			if mode == "unchecked" {
				c.SetContract(nil)
			}
			s := serveWith(b, c)
			c.SetOperationDelay(0)
			for i := range 50 {
				c.PutInstance(DemoZone, &compute.Instance{Name: fmt.Sprintf("other-%d", i), Tags: &compute.Tags{Items: []string{"x"}}})
			}
			b.ResetTimer()
			for i := range b.N {
				name := fmt.Sprintf("vm-%d", i)
				if _, err := s.svc.Instances.Insert(DefaultProject, DemoZone, s.instance(name, "t")).Do(); err != nil {
					b.Fatal(err)
				}
				if _, err := s.svc.Instances.Get(DefaultProject, DemoZone, name).Do(); err != nil {
					b.Fatal(err)
				}
				if _, err := s.svc.Instances.List(DefaultProject, DemoZone).Do(); err != nil {
					b.Fatal(err)
				}
				if _, err := s.svc.Instances.Delete(DefaultProject, DemoZone, name).Do(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
