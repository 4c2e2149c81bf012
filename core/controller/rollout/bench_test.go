package rollout

import (
	"testing"
)

// BenchmarkDecide measures one decision over a deployment of 5000 machines: settled, scaled
// down by half (the scale-down order of 2500 machines is named), and mid-rollout with a target
// cluster (a node mark per machine).
func BenchmarkDecide(b *testing.B) {
	for _, bc := range []struct {
		name string
		in   Input
	}{
		{"settled-5000", input(rollingMD(5000, "1", "0"), false, current("cur", 5000, 5000, 5000))},
		{"scale-down-5000-to-2500", input(rollingMD(2500, "1", "0"), false, setSpec{name: "cur", class: "a", replicas: 5000, available: 5000, machines: 5000, desired: 5000})},
		{"rolling-5000-target", input(rollingMD(5000, "10%", "0"), true, old("old", 4000, 4000, 4000), current("cur", 1500, 1000, 1500))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if dec := Decide(bc.in); dec.Action == "" {
					b.Fatal("no decision")
				}
			}
		})
	}
}
