package oracle

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	compute "google.golang.org/api/compute/v1"

	"github.com/machinist-io/machinist/providers/gcp/fakegcp"
)

// operationName matches the name of an operation in a path.
var operationName = regexp.MustCompile(`/operations/[^/]+`)

// normalize turns the fake's request log into comparable requests: only Compute API requests
// (token requests differ by design: each driver caches its own token), the operation's name and
// a requestId's value dropped (both are random), an insert's body decoded as the instance it is
// and encoded again by the Go client's rules (so a field one driver sends with its zero value
// and the other leaves out compare equal, as Compute Engine reads them equal).
func normalize(reqs []fakegcp.Request) ([]Request, error) {
	out := make([]Request, 0, len(reqs))
	for _, r := range reqs {
		if !strings.HasPrefix(r.Op, "compute.") {
			continue
		}
		q, err := url.ParseQuery(r.Query)
		if err != nil {
			return nil, fmt.Errorf("oracle: the query of %s %s: %w", r.Method, r.Path, err)
		}
		if q.Has("requestId") {
			q.Set("requestId", "SET")
		}
		n := Request{
			Method: r.Method,
			Op:     r.Op,
			Path:   operationName.ReplaceAllString(strings.TrimPrefix(r.Path, "/"+fakegcp.ComputePath), "/operations/OPERATION"),
			Query:  q.Encode(),
			Status: r.Status,
		}
		if len(r.Body) > 0 {
			if n.Body, err = canonicalBody(r.Op, r.Body); err != nil {
				return nil, fmt.Errorf("oracle: the body of %s %s: %w", r.Method, r.Path, err)
			}
		}
		out = append(out, n)
	}
	return out, nil
}

// canonicalBody is a request's body as its Go type encodes it without ForceSendFields.
func canonicalBody(op string, body []byte) (map[string]any, error) {
	var typed any = &map[string]any{}
	if op == fakegcp.OpInsertInstance {
		typed = &compute.Instance{}
	}
	if err := json.Unmarshal(body, typed); err != nil {
		return nil, err
	}
	b, err := json.Marshal(typed)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

// flatten lists a decoded JSON value as path=value lines, for comparing bodies field by field.
func flatten(prefix string, v any, out map[string]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			flatten(join(prefix, k), e, out)
		}
	case []any:
		for i, e := range v {
			flatten(fmt.Sprintf("%s[%d]", prefix, i), e, out)
		}
	default:
		b, _ := json.Marshal(v)
		out[prefix] = string(b)
	}
}

func join(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}
