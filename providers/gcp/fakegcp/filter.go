package fakegcp

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// filter is a parsed list filter: every term must match (Compute Engine ANDs the terms of a
// filter; OR is not served by the fake and answers 400).
type filter struct{ terms []term }

// term compares one field: `field = value`, `field != value`, `field : value` (has; `:*` is
// presence) or the regular-expression forms `field eq re`, `field ne re`.
type term struct {
	path  []string
	op    string
	value string
	re    *regexp.Regexp
}

var termPattern = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9_.\-]*)\s*(!=|=|:|\beq\b|\bne\b)\s*(.+)$`)

// parseFilter parses the expressions the driver and users send: one bare comparison, or
// parenthesized comparisons separated by spaces or AND.
func parseFilter(expr string) (*filter, *APIError) {
	f := &filter{}
	s := strings.TrimSpace(expr)
	bad := func() (*filter, *APIError) {
		return nil, errInvalid("filter", expr, "Invalid list filter expression.")
	}
	if s == "" {
		return f, nil
	}
	var parts []string
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
			parts = append(parts, s[1:end])
			s = strings.TrimSpace(s[end+1:])
			if rest, ok := strings.CutPrefix(s, "AND "); ok {
				s = strings.TrimSpace(rest)
			}
			if strings.HasPrefix(s, "OR ") {
				return bad()
			}
		}
	}
	for _, p := range parts {
		m := termPattern.FindStringSubmatch(strings.TrimSpace(p))
		if m == nil {
			return bad()
		}
		t := term{path: strings.Split(m[1], "."), op: m[2], value: unquote(strings.TrimSpace(m[3]))}
		if t.op == "eq" || t.op == "ne" {
			re, err := regexp.Compile("^(?:" + t.value + ")$")
			if err != nil {
				return bad()
			}
			t.re = re
		}
		f.terms = append(f.terms, t)
	}
	return f, nil
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

// matches reports whether a resource matches every term.
func (f *filter) matches(resource any) bool {
	if len(f.terms) == 0 {
		return true
	}
	b, _ := json.Marshal(resource)
	var doc any
	_ = json.Unmarshal(b, &doc)
	for _, t := range f.terms {
		if !t.matches(doc) {
			return false
		}
	}
	return true
}

func (t term) matches(doc any) bool {
	values, present := lookup(doc, t.path)
	switch t.op {
	case ":":
		if t.value == "*" {
			return present
		}
		for _, v := range values {
			if strings.Contains(v, t.value) {
				return true
			}
		}
		return false
	case "=":
		for _, v := range values {
			if v == t.value {
				return true
			}
		}
		return false
	case "!=":
		for _, v := range values {
			if v == t.value {
				return false
			}
		}
		return true
	case "eq":
		for _, v := range values {
			if t.re.MatchString(v) {
				return true
			}
		}
		return false
	case "ne":
		for _, v := range values {
			if t.re.MatchString(v) {
				return false
			}
		}
		return true
	}
	return false
}

// lookup returns the scalar values at path, descending into every element of arrays on the way
// (tags.items matches each tag), and whether the path exists.
func lookup(doc any, path []string) ([]string, bool) {
	if len(path) == 0 {
		switch v := doc.(type) {
		case nil:
			return nil, false
		case []any:
			var out []string
			for _, e := range v {
				vals, _ := lookup(e, nil)
				out = append(out, vals...)
			}
			return out, true
		case map[string]any:
			return nil, true
		default:
			return []string{fmt.Sprint(v)}, true
		}
	}
	switch v := doc.(type) {
	case map[string]any:
		next, ok := v[path[0]]
		if !ok {
			return nil, false
		}
		return lookup(next, path[1:])
	case []any:
		var out []string
		present := false
		for _, e := range v {
			vals, ok := lookup(e, path)
			out = append(out, vals...)
			present = present || ok
		}
		return out, present
	}
	return nil, false
}
