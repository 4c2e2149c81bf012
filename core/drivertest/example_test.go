package drivertest_test

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
)

// Check runs the rules outside `go test`, here against the reference driver.
func ExampleCheck() {
	class := func(name, cluster string) *v1alpha1.MachineClass {
		return &v1alpha1.MachineClass{
			ObjectMeta:   metav1.ObjectMeta{Name: name, Namespace: "default"},
			Provider:     memdriver.ProviderName,
			ProviderSpec: runtime.RawExtension{Raw: []byte(`{"cluster":"` + cluster + `","role":"worker"}`)},
		}
	}
	newTarget := func(context.Context) (drivertest.Target, error) {
		cloud := memdriver.NewCloud() // a fresh backend for every rule
		return drivertest.Target{
			Driver:     memdriver.New(cloud),
			Class:      class("workers", "shoot-a"),
			OtherClass: class("others", "shoot-b"),
			CountVMs:   func(_ context.Context, name string) (int, error) { return cloud.Count(name), nil },
		}, nil
	}
	passed := 0
	err := drivertest.Check(context.Background(), newTarget,
		drivertest.WithTimeout(10*time.Second),
		drivertest.WithReport(func(r drivertest.Result) {
			if r.Outcome == drivertest.Passed {
				passed++
			}
		}))
	fmt.Println(err, passed == len(drivertest.RuleNames())-1) // no secret: ErrorsHideSecrets skips
	// Output: <nil> true
}
