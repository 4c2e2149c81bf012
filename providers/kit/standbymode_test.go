package kit_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// TestStandbyMode: absent or empty is the default, an allowed value passes, anything else is
// InvalidArgument naming the annotation and every allowed value.
func TestStandbyMode(t *testing.T) {
	class := func(v *string) *v1alpha1.MachineClass {
		c := &v1alpha1.MachineClass{ObjectMeta: metav1.ObjectMeta{Name: "workers"}}
		if v != nil {
			c.Annotations = map[string]string{kit.StandbyModeAnnotation: *v}
		}
		return c
	}
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name  string
		class *v1alpha1.MachineClass
		want  string
		bad   bool
	}{
		{"nil class", nil, "stop", false},
		{"absent", class(nil), "stop", false},
		{"empty", class(str("")), "stop", false},
		{"allowed", class(str("suspend")), "suspend", false},
		{"the default spelled out", class(str("stop")), "stop", false},
		{"unknown", class(str("hibernate")), "", true},
		{"case matters", class(str("Suspend")), "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := kit.StandbyMode("gcp", tc.class, "stop", "stop", "suspend")
			if tc.bad {
				if !driver.IsCode(err, driver.InvalidArgument) {
					t.Fatalf("StandbyMode = %q, %v; want InvalidArgument", got, err)
				}
				for _, part := range []string{kit.StandbyModeAnnotation, `"stop"`, `"suspend"`, "workers"} {
					if !strings.Contains(err.Error(), part) {
						t.Errorf("error %q does not name %s", err, part)
					}
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("StandbyMode = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
