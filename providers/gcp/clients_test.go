package gcp

import (
	"reflect"
	"testing"

	compute "google.golang.org/api/compute/v1"
)

// TestDriverReachesNoComputeService: no type reachable from the Driver's fields holds a
// compute.Service (clientSet binds the calls in closures). Otherwise, since *Driver is used as an
// interface and urfave/cli's text/template calls methods by reflection, the linker keeps every
// call of every Compute API service: machinist-gcp grew from 23 to 34 MB and failed
// make check-slim's 40 % rule.
func TestDriverReachesNoComputeService(t *testing.T) {
	service := reflect.TypeFor[compute.Service]()
	seen := map[reflect.Type]bool{}
	var walk func(typ reflect.Type, path string)
	walk = func(typ reflect.Type, path string) {
		if seen[typ] {
			return
		}
		seen[typ] = true
		if typ == service {
			t.Errorf("%s is a compute.Service: bind the calls in clientSet's closures instead", path)
			return
		}
		switch typ.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Chan:
			walk(typ.Elem(), path)
		case reflect.Map:
			walk(typ.Key(), path)
			walk(typ.Elem(), path)
		case reflect.Struct:
			for i := range typ.NumField() {
				walk(typ.Field(i).Type, path+"."+typ.Field(i).Name)
			}
		}
	}
	walk(reflect.TypeFor[Driver](), "Driver")
	walk(reflect.TypeFor[clientSet](), "clientSet")
}
