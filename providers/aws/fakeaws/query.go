package fakeaws

import (
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// params are the form values of a query-protocol request. EC2's query protocol flattens
// structures and lists into dotted keys: Filter.1.Name, Filter.1.Value.2, NetworkInterface.1.
// SecurityGroupId.1; a list's members are numbered from 1.
type params map[string]string

func parseParams(form url.Values) params {
	p := params{}
	for k, v := range form {
		if len(v) > 0 {
			p[k] = v[len(v)-1]
		}
	}
	return p
}

func (p params) str(key string) string { return p[key] }

func (p params) has(key string) bool {
	if _, ok := p[key]; ok {
		return true
	}
	prefix := key + "."
	for k := range p {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

// int32 returns the integer at key; ok is false when the key is absent or not a number.
func (p params) int32(key string) (int32, bool, error) {
	v, present := p[key]
	if !present {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0, true, err
	}
	return int32(n), true, nil
}

func (p params) boolean(key string) (value, present bool) {
	v, ok := p[key]
	return v == "true", ok
}

// obj returns the members of the structure at prefix, with prefix removed from their keys.
func (p params) obj(prefix string) params {
	out := params{}
	prefix += "."
	for k, v := range p {
		if rest, ok := strings.CutPrefix(k, prefix); ok {
			out[rest] = v
		}
	}
	return out
}

// list returns the scalar members prefix.1, prefix.2, ... in order.
func (p params) list(prefix string) []string {
	var out []string
	for _, i := range p.indexes(prefix) {
		if v, ok := p[prefix+"."+strconv.Itoa(i)]; ok {
			out = append(out, v)
		}
	}
	return out
}

// structs returns the structure members prefix.1.*, prefix.2.*, ... in order.
func (p params) structs(prefix string) []params {
	var out []params
	for _, i := range p.indexes(prefix) {
		out = append(out, p.obj(prefix+"."+strconv.Itoa(i)))
	}
	return out
}

// indexes returns the list indexes used under prefix, sorted.
func (p params) indexes(prefix string) []int {
	seen := map[int]bool{}
	prefix += "."
	for k := range p {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		head, _, _ := strings.Cut(rest, ".")
		if n, err := strconv.Atoi(head); err == nil && n > 0 {
			seen[n] = true
		}
	}
	out := make([]int, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Ints(out)
	return out
}

// fingerprint is a canonical rendering of the request's parameters, less those that do not
// make two RunInstances requests different (ClientToken itself, DryRun).
func (p params) fingerprint(skip ...string) string {
	keys := make([]string, 0, len(p))
outer:
	for k := range p {
		for _, s := range skip {
			if k == s {
				continue outer
			}
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(p[k])
		b.WriteByte('\n')
	}
	return b.String()
}
