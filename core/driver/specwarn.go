package driver

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// SpecMode says how strictly a provider spec's field names are checked.
type SpecMode int

const (
	// Lenient decodes as Gardener's providers do (Go's encoding/json): a field name matches
	// exactly or, failing that, case-insensitively; unknown fields are ignored; of a repeated
	// field the last value wins. What was ignored or matched loosely comes back as warnings.
	Lenient SpecMode = iota
	// Strict refuses what Lenient warns about (unknown, mis-cased and repeated fields) with
	// InvalidArgument, as machinist did before it decoded like Gardener.
	Strict
)

func (m SpecMode) String() string {
	if m == Strict {
		return "strict"
	}
	return "lenient"
}

// FieldNames says how the keys of a spec match the fields of its Go type.
type FieldNames int

const (
	// FoldedNames are Go's encoding/json rules: a key matches the field of that exact name or,
	// failing that, the first field whose name equals it case-insensitively. Gardener's Azure
	// provider (and most providers that call json.Unmarshal) decode so.
	FoldedNames FieldNames = iota
	// ExactNames are the rules of Kubernetes' runtime decoders (apimachinery's JSON serializer,
	// sigs.k8s.io/json): keys match case-sensitively, so a mis-cased key is an unknown field.
	// Gardener's OpenStack provider decodes so.
	ExactNames
)

func (n FieldNames) String() string {
	if n == ExactNames {
		return "exact names"
	}
	return "folded names"
}

// SpecProblem is what is wrong with a field name of a provider spec.
type SpecProblem string

const (
	// UnknownField is a field the provider does not have; it is ignored.
	UnknownField SpecProblem = "UnknownField"
	// CaseMismatch is a field whose name differs from the provider's only in case; with
	// FoldedNames it is read as the provider's field (with ExactNames it is an UnknownField).
	CaseMismatch SpecProblem = "CaseMismatch"
	// DuplicateField is a field given more than once in one object (possibly in different
	// cases); the later value overrides the earlier one.
	DuplicateField SpecProblem = "DuplicateField"
)

func (w SpecWarning) strictText() string {
	switch w.Problem {
	case CaseMismatch:
		return fmt.Sprintf("%s: field name differs in case from %s", w.Path, w.Field)
	case DuplicateField:
		return w.Path + ": duplicate field"
	}
	if w.Field != "" {
		return fmt.Sprintf("%s: unknown field (did you mean %s? names are case-sensitive)", w.Path, w.Field)
	}
	return w.Path + ": unknown field"
}

// SpecWarning is one field of a provider spec that lenient decoding ignored or matched loosely.
// It names the field, never its value, so it is safe in events, conditions and logs.
type SpecWarning struct {
	// Path is the field as written, from the spec's root, e.g.
	// providerSpec.properties.machineSet.Kind.
	Path string `json:"path"`
	// Problem says what is wrong with it.
	Problem SpecProblem `json:"problem"`
	// Field is the provider's name of the field a CaseMismatch was read as, or of the field an
	// UnknownField differs from only in case (ExactNames); "" otherwise.
	Field string `json:"field,omitempty"`
}

func (w SpecWarning) String() string {
	switch w.Problem {
	case CaseMismatch:
		return fmt.Sprintf("%s: read as %s (field names match case-insensitively): write %s", w.Path, w.Field, w.Field)
	case DuplicateField:
		return fmt.Sprintf("%s: given more than once: the last value is used", w.Path)
	}
	if w.Field != "" {
		return fmt.Sprintf("%s: unknown field: ignored (field names are case-sensitive: write %s)", w.Path, w.Field)
	}
	return fmt.Sprintf("%s: unknown field: ignored", w.Path)
}

// JoinSpecWarnings renders warnings on one line, separated by "; ".
func JoinSpecWarnings(ws []SpecWarning) string {
	s := make([]string, len(ws))
	for i, w := range ws {
		s[i] = w.String()
	}
	return strings.Join(s, "; ")
}

// SpecWarnings walks the JSON in data along the Go type of out (a pointer, as given to
// json.Unmarshal) and returns the object keys that decoding by names ignores or matches only
// case-insensitively, and the keys an object repeats. Values that do not fit the type are
// skipped (decoding reports them); map keys are data, not field names, and are never reported.
// root is the path of data's top level. It returns an error only for malformed JSON.
func SpecWarnings(data []byte, out any, names FieldNames, root *field.Path) ([]SpecWarning, error) {
	t := reflect.TypeOf(out)
	if t == nil {
		return nil, errors.New("no type to check the fields against")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	w := &specWalker{dec: dec, exact: names == ExactNames}
	if err := w.value(t, root); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the top-level value")
	}
	return w.warnings, nil
}

type specWalker struct {
	dec      *json.Decoder
	exact    bool
	warnings []SpecWarning
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// opaque reports whether t decodes itself, so its fields are not encoding/json's to match.
func opaque(t reflect.Type) bool {
	return t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) ||
		t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler)
}

// value reads one JSON value, which decodes into t, at path.
func (w *specWalker) value(t reflect.Type, path *field.Path) error {
	for t.Kind() == reflect.Pointer && !opaque(t) {
		t = t.Elem()
	}
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar: nothing to match
	}
	if opaque(t) {
		return w.skipRest(delim)
	}
	switch {
	case delim == '{' && t.Kind() == reflect.Struct:
		return w.object(t, path)
	case delim == '{' && t.Kind() == reflect.Map:
		return w.mapValues(t.Elem(), path)
	case delim == '[' && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		for i := 0; w.dec.More(); i++ {
			if err := w.value(t.Elem(), path.Index(i)); err != nil {
				return err
			}
		}
		_, err := w.dec.Token() // ]
		return err
	}
	return w.skipRest(delim)
}

// object reads the members of a JSON object that decodes into struct type t.
func (w *specWalker) object(t reflect.Type, path *field.Path) error {
	fields := jsonFieldsOf(t)
	seen := map[int]bool{}
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		i := fields.match(key, w.exact)
		child := path.Child(key)
		switch {
		case i < 0:
			near := ""
			if j := fields.match(key, false); j >= 0 {
				near = fields.list[j].name
			}
			w.warnings = append(w.warnings, SpecWarning{Path: child.String(), Problem: UnknownField, Field: near})
			if err := w.skipValue(); err != nil {
				return err
			}
			continue
		case seen[i]:
			w.warnings = append(w.warnings, SpecWarning{Path: child.String(), Problem: DuplicateField})
		case fields.list[i].name != key:
			w.warnings = append(w.warnings, SpecWarning{Path: child.String(), Problem: CaseMismatch, Field: fields.list[i].name})
		}
		seen[i] = true
		if err := w.value(fields.list[i].typ, child); err != nil {
			return err
		}
	}
	_, err := w.dec.Token() // }
	return err
}

// mapValues reads the members of a JSON object that decodes into a map with values of type elem.
func (w *specWalker) mapValues(elem reflect.Type, path *field.Path) error {
	seen := map[string]bool{}
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if seen[key] {
			w.warnings = append(w.warnings, SpecWarning{Path: path.Key(key).String(), Problem: DuplicateField})
		}
		seen[key] = true
		if err := w.value(elem, path.Key(key)); err != nil {
			return err
		}
	}
	_, err := w.dec.Token() // }
	return err
}

// skipValue reads one JSON value and ignores it.
func (w *specWalker) skipValue() error {
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); ok {
		return w.skipRest(d)
	}
	return nil
}

// skipRest reads up to the end of the object or array opened by open.
func (w *specWalker) skipRest(open json.Delim) error {
	if open != '{' && open != '[' {
		return fmt.Errorf("unexpected %v", open)
	}
	for depth := 1; depth > 0; {
		tok, err := w.dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
}

// jsonField is a struct field as encoding/json sees it.
type jsonField struct {
	name   string
	typ    reflect.Type
	tagged bool
	depth  int
	index  []int
}

// jsonFields are the fields of one struct type, in declaration order.
type jsonFields struct {
	list  []jsonField
	exact map[string]int
}

// match returns the field key decodes into, or -1: the field of that exact name, or with
// folding (encoding/json) the first field whose name equals key case-insensitively.
func (f *jsonFields) match(key string, exact bool) int {
	if i, ok := f.exact[key]; ok {
		return i
	}
	if exact {
		return -1
	}
	for i, fl := range f.list {
		if strings.EqualFold(fl.name, key) {
			return i
		}
	}
	return -1
}

var jsonFieldCache sync.Map // reflect.Type -> *jsonFields

// jsonFieldsOf lists the fields encoding/json decodes into for struct type t: exported fields
// under their tag or Go name, fields of untagged embedded structs promoted, and of several fields
// with one name the shallowest (a tagged one breaking a tie) or none, as encoding/json does.
func jsonFieldsOf(t reflect.Type) *jsonFields {
	if f, ok := jsonFieldCache.Load(t); ok {
		return f.(*jsonFields)
	}
	type queued struct {
		typ   reflect.Type
		index []int
	}
	var all []jsonField
	visited := map[reflect.Type]bool{}
	next := []queued{{typ: t}}
	for depth := 0; len(next) > 0; depth++ {
		current := next
		next = nil
		for _, q := range current {
			if visited[q.typ] {
				continue
			}
			visited[q.typ] = true
			for i := range q.typ.NumField() {
				sf := q.typ.Field(i)
				ft := sf.Type
				if sf.Anonymous {
					if ft.Kind() == reflect.Pointer {
						ft = ft.Elem()
					}
					if !sf.IsExported() && ft.Kind() != reflect.Struct {
						continue
					}
				} else if !sf.IsExported() {
					continue
				}
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, _, _ := strings.Cut(tag, ",")
				index := append(append([]int(nil), q.index...), i)
				if name == "" && sf.Anonymous && ft.Kind() == reflect.Struct {
					next = append(next, queued{typ: ft, index: index})
					continue
				}
				tagged := name != ""
				if !tagged {
					name = sf.Name
				}
				all = append(all, jsonField{name: name, typ: sf.Type, tagged: tagged, depth: depth, index: index})
			}
		}
	}
	// Keep the dominant field of each name.
	byName := map[string][]jsonField{}
	for _, f := range all {
		byName[f.name] = append(byName[f.name], f)
	}
	var kept []jsonField
	for _, fs := range byName {
		if f, ok := dominant(fs); ok {
			kept = append(kept, f)
		}
	}
	sort.Slice(kept, func(i, j int) bool { return lessIndex(kept[i].index, kept[j].index) })
	out := &jsonFields{list: kept, exact: make(map[string]int, len(kept))}
	for i, f := range kept {
		out.exact[f.name] = i
	}
	jsonFieldCache.Store(t, out)
	return out
}

// dominant picks the field that wins among fields of one name: the shallowest, and among those
// the only tagged one; otherwise there is none.
func dominant(fs []jsonField) (jsonField, bool) {
	shallowest := fs[0].depth
	for _, f := range fs {
		if f.depth < shallowest {
			shallowest = f.depth
		}
	}
	var top []jsonField
	for _, f := range fs {
		if f.depth == shallowest {
			top = append(top, f)
		}
	}
	if len(top) == 1 {
		return top[0], true
	}
	var tagged []jsonField
	for _, f := range top {
		if f.tagged {
			tagged = append(tagged, f)
		}
	}
	if len(tagged) == 1 {
		return tagged[0], true
	}
	return jsonField{}, false
}

func lessIndex(a, b []int) bool {
	for i := range a {
		if i >= len(b) {
			return false
		}
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}

// NoteSpecWarnings appends the warnings to err's message, keeping its code, so a class that is
// invalid because a field was ignored (a misspelt name) says which. Warnings whose field the
// message names already (a strict refusal) are left out; err is returned unchanged when nothing
// is left or err is nil.
func NoteSpecWarnings(err error, ws []SpecWarning) error {
	if err == nil {
		return nil
	}
	msg := MessageOf(err)
	var left []SpecWarning
	for _, w := range ws {
		if !strings.Contains(msg, w.Path) {
			left = append(left, w)
		}
	}
	if len(left) == 0 {
		return err
	}
	return Errorf(CodeOf(err), "%s (decoding noted: %s)", msg, JoinSpecWarnings(left))
}
