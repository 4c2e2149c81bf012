package fakegcp

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
)

// A list filter, in the grammar the Compute discovery document gives the `filter` parameter of
// its list methods, and no other:
//
//   - AIP-160 comparisons `field op value`, op one of = != > < <= >= :, value a string (quoted or
//     a bare word), a number or a boolean; `field:*` tests that the field is set. One bare
//     comparison, or comparisons each in parentheses, joined by blanks or AND (both AND) or OR
//     (which binds tighter, as in AIP-160).
//   - regular expressions `field eq literal` and `field ne literal` (RE2, matching the whole
//     field): one bare expression, or expressions each in parentheses joined by blanks. The two
//     kinds cannot be mixed.
//
// A field is a path through objects and maps (labels.env, scheduling.automaticRestart) to a
// string, number or boolean; a path into a repeated field (tags.items, networkInterfaces.network,
// disks[0]...) or to an object is not in the grammar, and Compute Engine answers such filters
// `400 Invalid value for field 'filter': '…'. Invalid list filter expression.`, as users report
// for `tags.items=mytargets` and `networkInterfaces.network:vpc1 AND tags.items=(vm-tag)`.

// filter is a parsed filter: every clause must hold; a clause holds when one of its terms does.
type filter struct{ clauses [][]term }

// term compares one field.
type term struct {
	path  []string
	op    string
	value string
	re    *regexp.Regexp
}

var (
	aipTerm   = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_-]+)*)\s*(!=|<=|>=|=|<|>|:)\s*(.+)$`)
	regexTerm = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_-]+)*)\s+(eq|ne)\s+(.+)$`)
	bareValue = regexp.MustCompile(`^[^\s()"']+$`)
)

// parseFilter parses expr for a list of items of type item (compute.Instance, ...): the field
// paths must reach a scalar of it.
func parseFilter(expr string, item reflect.Type) (*filter, *APIError) {
	bad := func() (*filter, *APIError) {
		return nil, errInvalid("filter", expr, "Invalid list filter expression.")
	}
	s := strings.TrimSpace(expr)
	if s == "" {
		return &filter{}, nil
	}
	var parts []string
	var joins []string // the joiner before each part after the first: "AND", "OR" or ""
	if !strings.HasPrefix(s, "(") {
		parts = []string{s}
	} else {
		for s != "" {
			if !strings.HasPrefix(s, "(") {
				return bad()
			}
			end := closingParen(s)
			if end < 0 {
				return bad()
			}
			parts = append(parts, strings.TrimSpace(s[1:end]))
			s = strings.TrimSpace(s[end+1:])
			join := ""
			for _, j := range []string{"AND", "OR"} {
				if rest, ok := strings.CutPrefix(s, j+" "); ok {
					join, s = j, strings.TrimSpace(rest)
				}
			}
			if s != "" {
				joins = append(joins, join)
			}
		}
	}
	terms := make([]term, 0, len(parts))
	regex := false
	for i, p := range parts {
		t, isRegex, ok := parseTerm(p, item)
		if !ok || (i > 0 && isRegex != regex) {
			return bad()
		}
		regex = isRegex
		terms = append(terms, t)
	}
	f := &filter{}
	for i, t := range terms {
		switch {
		case i > 0 && joins[i-1] == "OR" && !regex:
			last := len(f.clauses) - 1
			f.clauses[last] = append(f.clauses[last], t)
		case i > 0 && joins[i-1] != "" && regex:
			return bad() // regular expressions are joined by blanks only
		default:
			f.clauses = append(f.clauses, []term{t})
		}
	}
	return f, nil
}

// parseTerm parses one comparison; isRegex tells eq/ne from AIP-160.
func parseTerm(p string, item reflect.Type) (t term, isRegex, ok bool) {
	if m := regexTerm.FindStringSubmatch(p); m != nil {
		raw := strings.TrimSpace(m[3])
		value := unquote(raw)
		re, err := regexp.Compile("^(?:" + value + ")$")
		if err != nil || (value == raw && !bareValue.MatchString(raw)) || !scalarPath(item, strings.Split(m[1], "."), false) {
			return term{}, true, false
		}
		return term{path: strings.Split(m[1], "."), op: m[2], value: value, re: re}, true, true
	}
	m := aipTerm.FindStringSubmatch(p)
	if m == nil {
		return term{}, false, false
	}
	raw := strings.TrimSpace(m[3])
	value := unquote(raw)
	if value == raw && !bareValue.MatchString(raw) {
		return term{}, false, false // a bare value is one word
	}
	presence := m[2] == ":" && raw == "*"
	if !scalarPath(item, strings.Split(m[1], "."), presence) {
		return term{}, false, false
	}
	return term{path: strings.Split(m[1], "."), op: m[2], value: value}, false, true
}

// scalarPath reports whether path leads through objects and maps of t to a string, number or
// boolean (or, for a presence test, to any field but a repeated one).
func scalarPath(t reflect.Type, path []string, presence bool) bool {
	for i, seg := range path {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Struct:
			f, ok := jsonField(t, seg)
			if !ok {
				return false
			}
			t = f
		case reflect.Map:
			t = t.Elem()
		default:
			return false // a scalar has no fields; a repeated field is not filterable
		}
		if t.Kind() == reflect.Slice && i < len(path) {
			return false
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint32, reflect.Uint64, reflect.Float64:
		return true
	case reflect.Struct, reflect.Map:
		return presence
	}
	return false
}

// jsonField is the type of a struct's field of a JSON name.
func jsonField(t reflect.Type, name string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == name && f.IsExported() {
			return f.Type, true
		}
	}
	return nil, false
}

// closingParen is the index of the ')' closing the '(' at s[0], skipping quoted text.
func closingParen(s string) int {
	depth := 0
	var quote byte
	for i := range len(s) {
		ch := s[i]
		switch {
		case quote != 0:
			if ch == quote {
				quote = 0
			}
		case ch == '"' || ch == '\'':
			quote = ch
		case ch == '(':
			depth++
		case ch == ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

func unquote(v string) string {
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		return v[1 : len(v)-1]
	}
	return v
}

// matches reports whether a resource satisfies every clause.
func (f *filter) matches(resource any) bool {
	if len(f.clauses) == 0 {
		return true
	}
	b, _ := json.Marshal(resource)
	var doc any
	_ = json.Unmarshal(b, &doc)
	for _, clause := range f.clauses {
		held := false
		for _, t := range clause {
			held = held || t.matches(doc)
		}
		if !held {
			return false
		}
	}
	return true
}

func (t term) matches(doc any) bool {
	v, present := lookup(doc, t.path)
	switch t.op {
	case ":":
		if t.value == "*" {
			return present
		}
		return present && v == t.value
	case "=":
		return v == t.value || (!present && (t.value == "false" || t.value == ""))
	case "!=":
		return v != t.value && !(!present && (t.value == "false" || t.value == ""))
	case "eq":
		return t.re.MatchString(v)
	case "ne":
		return !t.re.MatchString(v)
	}
	return compare(v, t.value, t.op)
}

// compare orders numbers as numbers and anything else (timestamps included) as strings.
func compare(v, value, op string) bool {
	c := strings.Compare(v, value)
	if a, err := strconv.ParseFloat(v, 64); err == nil {
		if b, err := strconv.ParseFloat(value, 64); err == nil {
			c = 0
			if a < b {
				c = -1
			} else if a > b {
				c = 1
			}
		}
	}
	switch op {
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	case ">=":
		return c >= 0
	}
	return false
}

// lookup returns the scalar at path in a decoded resource and whether it is set.
func lookup(doc any, path []string) (string, bool) {
	for _, seg := range path {
		m, ok := doc.(map[string]any)
		if !ok {
			return "", false
		}
		if doc, ok = m[seg]; !ok {
			return "", false
		}
	}
	switch v := doc.(type) {
	case nil:
		return "", false
	case string:
		return v, true
	case map[string]any, []any:
		return "", true
	default:
		return fmt.Sprint(v), true
	}
}
