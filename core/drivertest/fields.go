package drivertest

import (
	"bufio"
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"
)

// CheckJSONFields checks that the Go type typ has every JSON field listed in file, under the same
// name (case included) and of a compatible JSON kind, so whatever a spec written for another
// implementation sets is read into a field. Each line of file is "path kind": the path with "."
// between fields, "[]" after an array and "{}" after a map (spec.networks[].id, tags{}), the kind
// one of string, bool, number, object, array or map. Lines starting with # are comments (say
// where the list comes from).
func CheckJSONFields(t testing.TB, file string, typ reflect.Type) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		path, kind, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("%s: %q is not \"path kind\"", file, line)
		}
		n++
		ft, where := jsonFieldType(typ, path)
		if ft == nil {
			t.Errorf("%s: %s has no field %s", typ, where, path)
			continue
		}
		if !kindFits(ft, kind) {
			t.Errorf("%s: %s is %s, want a JSON %s", typ, path, ft, kind)
		}
	}
	if n == 0 {
		t.Fatalf("%s lists no fields", file)
	}
}

// jsonFieldType follows path through t; on failure it returns nil and the part of the path
// that was found.
func jsonFieldType(t reflect.Type, path string) (reflect.Type, string) {
	found := "(root)"
	for _, seg := range strings.Split(path, ".") {
		name := strings.TrimRight(seg, "[]{}")
		suffix := seg[len(name):]
		if name != "" {
			t = deref(t)
			if t.Kind() != reflect.Struct {
				return nil, found
			}
			f, ok := fieldByJSONName(t, name)
			if !ok {
				return nil, found
			}
			t = f
			found = strings.TrimPrefix(found+"."+name, "(root).")
		}
		for ; suffix != ""; suffix = suffix[2:] {
			t = deref(t)
			switch {
			case strings.HasPrefix(suffix, "[]") && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array),
				strings.HasPrefix(suffix, "{}") && t.Kind() == reflect.Map:
				t = t.Elem()
			default:
				return nil, found
			}
		}
	}
	return t, found
}

// fieldByJSONName finds the field named name (exactly) as encoding/json names fields, looking
// into untagged embedded structs.
func fieldByJSONName(t reflect.Type, name string) (reflect.Type, bool) {
	for i := range t.NumField() {
		sf := t.Field(i)
		tag, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if tag == "-" {
			continue
		}
		if tag == "" && sf.Anonymous && deref(sf.Type).Kind() == reflect.Struct {
			if ft, ok := fieldByJSONName(deref(sf.Type), name); ok {
				return ft, true
			}
			continue
		}
		if !sf.IsExported() {
			continue
		}
		if tag == "" {
			tag = sf.Name
		}
		if tag == name {
			return sf.Type, true
		}
	}
	return nil, false
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

func kindFits(t reflect.Type, kind string) bool {
	t = deref(t)
	switch kind {
	case "string":
		return t.Kind() == reflect.String
	case "bool":
		return t.Kind() == reflect.Bool
	case "number":
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
			return true
		}
	case "object":
		return t.Kind() == reflect.Struct
	case "array":
		return t.Kind() == reflect.Slice || t.Kind() == reflect.Array
	case "map":
		return t.Kind() == reflect.Map
	}
	return false
}
