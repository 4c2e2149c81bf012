package fakegcp

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	compute "google.golang.org/api/compute/v1"
)

// Contract is the Compute API as Google publishes it: the discovery document
// (compute/v1/compute-api.json) of the google.golang.org/api module the client is generated
// from. The fake checks every Compute request against it, as Compute Engine does (a path
// parameter that does not match its pattern, an unknown query parameter, an unknown field or a
// value of the wrong type or outside its enum in the body are answered 400), and every answer it
// gives (a field the schema lacks or a value of the wrong type is the fake's own bug: it answers
// 500 and records the violation, Cloud.ContractViolations).
type Contract struct {
	Revision string
	methods  []*contractMethod
	schemas  map[string]*schema
	standard map[string]*param // the parameters every method takes (alt, fields, key, ...)
}

type contractMethod struct {
	ID         string            `json:"id"`
	Path       string            `json:"path"`
	HTTPMethod string            `json:"httpMethod"`
	Parameters map[string]*param `json:"parameters"`
	Request    *struct {
		Ref string `json:"$ref"`
	} `json:"request"`
	Response *struct {
		Ref string `json:"$ref"`
	} `json:"response"`
	segments []string
}

type param struct {
	Type     string   `json:"type"`
	Format   string   `json:"format"`
	Location string   `json:"location"`
	Pattern  string   `json:"pattern"`
	Minimum  string   `json:"minimum"`
	Maximum  string   `json:"maximum"`
	Enum     []string `json:"enum"`
	Repeated bool     `json:"repeated"`
	re       *regexp.Regexp
}

type schema struct {
	Type                 string             `json:"type"`
	Format               string             `json:"format"`
	Ref                  string             `json:"$ref"`
	Properties           map[string]*schema `json:"properties"`
	Items                *schema            `json:"items"`
	AdditionalProperties *schema            `json:"additionalProperties"`
	Enum                 []string           `json:"enum"`
	Pattern              string             `json:"pattern"`
	re                   *regexp.Regexp
}

// ParseContract reads a discovery document.
func ParseContract(doc []byte) (*Contract, error) {
	var raw struct {
		Revision   string             `json:"revision"`
		Schemas    map[string]*schema `json:"schemas"`
		Parameters map[string]*param  `json:"parameters"`
		Resources  json.RawMessage    `json:"resources"`
	}
	if err := json.Unmarshal(doc, &raw); err != nil {
		return nil, fmt.Errorf("fakegcp: the Compute discovery document: %w", err)
	}
	c := &Contract{Revision: raw.Revision, schemas: raw.Schemas, standard: raw.Parameters}
	if err := c.addResources(raw.Resources); err != nil {
		return nil, err
	}
	if len(c.methods) == 0 || len(c.schemas) == 0 {
		return nil, fmt.Errorf("fakegcp: the Compute discovery document has no methods or schemas")
	}
	for _, s := range c.schemas {
		if err := compilePatterns(s); err != nil {
			return nil, err
		}
	}
	for _, m := range c.methods {
		for name, p := range m.Parameters {
			if p.Pattern == "" {
				continue
			}
			re, err := regexp.Compile("^(?:" + p.Pattern + ")$")
			if err != nil {
				return nil, fmt.Errorf("fakegcp: %s parameter %s: %w", m.ID, name, err)
			}
			p.re = re
		}
	}
	return c, nil
}

// addResources collects the methods of the resources, nested ones included.
func (c *Contract) addResources(resources json.RawMessage) error {
	if len(resources) == 0 {
		return nil
	}
	var rs map[string]struct {
		Methods   map[string]*contractMethod `json:"methods"`
		Resources json.RawMessage            `json:"resources"`
	}
	if err := json.Unmarshal(resources, &rs); err != nil {
		return fmt.Errorf("fakegcp: the Compute discovery document's resources: %w", err)
	}
	for _, r := range rs {
		for _, m := range r.Methods {
			m.segments = strings.Split(m.Path, "/")
			c.methods = append(c.methods, m)
		}
		if err := c.addResources(r.Resources); err != nil {
			return err
		}
	}
	return nil
}

func compilePatterns(s *schema) error {
	if s == nil {
		return nil
	}
	if s.Pattern != "" && s.re == nil {
		re, err := regexp.Compile("^(?:" + s.Pattern + ")$")
		if err != nil {
			return fmt.Errorf("fakegcp: schema pattern %q: %w", s.Pattern, err)
		}
		s.re = re
	}
	for _, p := range s.Properties {
		if err := compilePatterns(p); err != nil {
			return err
		}
	}
	if err := compilePatterns(s.Items); err != nil {
		return err
	}
	return compilePatterns(s.AdditionalProperties)
}

// method finds the method of an HTTP method and a path below compute/v1/, and its path
// parameters. Of several matches, the one with the most literal segments wins.
func (c *Contract) method(httpMethod, path string) (*contractMethod, map[string]string) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	var best *contractMethod
	bestLiterals := -1
	for _, m := range c.methods {
		if m.HTTPMethod != httpMethod || len(m.segments) != len(segs) {
			continue
		}
		literals, ok := 0, true
		for i, s := range m.segments {
			if strings.HasPrefix(s, "{") {
				continue
			}
			if s != segs[i] {
				ok = false
				break
			}
			literals++
		}
		if ok && literals > bestLiterals {
			best, bestLiterals = m, literals
		}
	}
	if best == nil {
		return nil, nil
	}
	values := map[string]string{}
	for i, s := range best.segments {
		if strings.HasPrefix(s, "{") {
			v, err := url.PathUnescape(segs[i])
			if err != nil {
				v = segs[i]
			}
			values[strings.Trim(s, "{}+")] = v
		}
	}
	return best, values
}

// checkRequest checks a request's path parameters, query and body (nil when it has none)
// against the method, with Compute Engine's 400 answers.
func (c *Contract) checkRequest(m *contractMethod, pathValues map[string]string, query url.Values, body []byte) *APIError {
	for _, name := range sortedKeys(pathValues) {
		if p := m.Parameters[name]; p != nil && p.re != nil && !p.re.MatchString(pathValues[name]) {
			return errInvalid(name, pathValues[name], fmt.Sprintf("Must be a match of regex '%s'", p.Pattern))
		}
	}
	for _, name := range sortedKeys(query) {
		p := m.Parameters[name]
		if p == nil || p.Location != "query" {
			p = c.standard[name]
		}
		if p == nil {
			return apiErr(400, "badRequest", "Invalid JSON payload received. Unknown name \"%s\": Cannot bind query parameter. Field '%s' could not be found in request message.", name, name)
		}
		for _, v := range query[name] {
			if e := checkParam(name, p, v); e != nil {
				return e
			}
		}
	}
	if m.Request == nil {
		return nil
	}
	if len(body) == 0 {
		return apiErr(400, "required", "Required field 'resource' not specified")
	}
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		return apiErr(400, "parseError", "Invalid JSON payload received. %v", err)
	}
	if problem := c.check(doc, &schema{Ref: m.Request.Ref}, "resource", true); problem != "" {
		if strings.HasPrefix(problem, "Invalid value for field") {
			return apiErr(400, "invalid", "%s", problem) // a value Compute Engine checks
		}
		return apiErr(400, "invalid", "Invalid JSON payload received. %s", problem) // the JSON does not parse into the message
	}
	return nil
}

// checkParam checks a query parameter's value by its type, format, bounds, enum and pattern.
func checkParam(name string, p *param, v string) *APIError {
	bad := func(why string) *APIError { return errInvalid(name, v, why) }
	switch p.Type {
	case "integer":
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return bad("Must be an integer.")
		}
		if p.Minimum != "" {
			if lo, _ := strconv.ParseInt(p.Minimum, 10, 64); n < lo {
				return bad("Must be at least " + p.Minimum + ".")
			}
		}
		if p.Maximum != "" {
			if hi, _ := strconv.ParseInt(p.Maximum, 10, 64); n > hi {
				return bad("Must be at most " + p.Maximum + ".")
			}
		}
		if p.Format == "uint32" && (n < 0 || n > 1<<32-1) {
			return bad("Must be an unsigned 32-bit integer.")
		}
	case "boolean":
		if v != "true" && v != "false" {
			return bad("Must be true or false.")
		}
	}
	if len(p.Enum) > 0 && !slices.Contains(p.Enum, v) {
		return bad("Must be one of " + strings.Join(p.Enum, ", ") + ".")
	}
	if p.re != nil && !p.re.MatchString(v) {
		return bad(fmt.Sprintf("Must be a match of regex '%s'", p.Pattern))
	}
	return nil
}

// checkAnswer checks an answer's body against the method's response schema; it returns the
// violation, or "".
func (c *Contract) checkAnswer(m *contractMethod, body []byte) string {
	if m.Response == nil {
		return ""
	}
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		return fmt.Sprintf("%s: the answer is not JSON: %v", m.ID, err)
	}
	if problem := c.check(doc, &schema{Ref: m.Response.Ref}, m.Response.Ref, false); problem != "" {
		return m.ID + ": " + problem
	}
	return ""
}

// check checks a decoded JSON value against a schema and returns the first violation at path.
// A request may give 64-bit and 32-bit integers as strings or numbers (proto3 JSON reads both);
// an answer writes them as Google does: int64/uint64 as strings, int32/uint32 as numbers.
func (c *Contract) check(v any, s *schema, path string, request bool) string {
	for s.Ref != "" {
		ref, ok := c.schemas[s.Ref]
		if !ok {
			return fmt.Sprintf("%s: the schema %s is not in the discovery document", path, s.Ref)
		}
		s = ref
	}
	if v == nil {
		return "" // null is the field's default
	}
	wrong := func(want string) string { return fmt.Sprintf("%s: %s, want %s", path, describe(v), want) }
	switch s.Type {
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return wrong("an object")
		}
		for _, k := range sortedKeys(obj) {
			prop := s.Properties[k]
			if prop == nil {
				prop = s.AdditionalProperties
			}
			if prop == nil {
				return fmt.Sprintf("Unknown name %q at '%s': Cannot find field.", k, path)
			}
			if p := c.check(obj[k], prop, path+"."+k, request); p != "" {
				return p
			}
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return wrong("an array")
		}
		for i, e := range arr {
			at := fmt.Sprintf("%s[%d]", path, i)
			if str, ok := e.(string); ok && s.re != nil && !s.re.MatchString(str) {
				// The pattern of a repeated string is on the array (Tags.items).
				return fmt.Sprintf("Invalid value for field '%s': '%s'. Must be a match of regex '%s'", at, str, s.Pattern)
			}
			if p := c.check(e, s.Items, at, request); p != "" {
				return p
			}
		}
	case "string":
		return checkString(v, s, path, request, wrong)
	case "integer":
		if _, isString := v.(string); isString && request {
			if _, err := strconv.ParseInt(v.(string), 10, 64); err != nil {
				return wrong("an integer")
			}
			return ""
		}
		if f, ok := v.(float64); !ok || f != float64(int64(f)) {
			return wrong("an integer number")
		}
	case "number":
		if _, ok := v.(float64); !ok {
			return wrong("a number")
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return wrong("a boolean")
		}
	case "any", "":
	default:
		return fmt.Sprintf("%s: the schema's type %q is unknown to the fake", path, s.Type)
	}
	return ""
}

func checkString(v any, s *schema, path string, request bool, wrong func(string) string) string {
	str, isString := v.(string)
	switch s.Format {
	case "int64", "uint64":
		if f, ok := v.(float64); ok && request && f == float64(int64(f)) {
			return ""
		}
		if !isString {
			return wrong("a 64-bit integer as a string")
		}
		if _, err := strconv.ParseInt(str, 10, 64); err != nil && s.Format == "int64" {
			return wrong("a 64-bit integer")
		}
		if _, err := strconv.ParseUint(str, 10, 64); err != nil && s.Format == "uint64" {
			return wrong("an unsigned 64-bit integer")
		}
		return ""
	case "byte":
		if !isString {
			return wrong("base64 bytes")
		}
		if _, err := base64.StdEncoding.DecodeString(str); err != nil {
			if _, err := base64.URLEncoding.DecodeString(str); err != nil {
				return wrong("base64 bytes")
			}
		}
		return ""
	}
	if !isString {
		return wrong("a string")
	}
	if len(s.Enum) > 0 && !slices.Contains(s.Enum, str) {
		return fmt.Sprintf("Invalid value at '%s', %q: must be one of %s", path, str, strings.Join(s.Enum, ", "))
	}
	if s.re != nil && !s.re.MatchString(str) {
		return fmt.Sprintf("Invalid value for field '%s': '%s'. Must be a match of regex '%s'", path, str, s.Pattern)
	}
	return ""
}

func describe(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return fmt.Sprintf("the string %q", v)
	case float64:
		return fmt.Sprintf("the number %v", v)
	case bool:
		return fmt.Sprintf("the boolean %v", v)
	}
	return fmt.Sprintf("%T", v)
}

// DiscoveryEnv names a discovery document to read instead of the module's.
const DiscoveryEnv = "FAKEGCP_COMPUTE_DISCOVERY"

var (
	contractOnce sync.Once
	contract     *Contract
	contractErr  error
)

// DefaultContract is the discovery document of the google.golang.org/api module the fake's
// Compute client was compiled from (compute/v1/compute-api.json beside the package's source
// files, or in the module cache when the binary was built with -trimpath), or the file
// $FAKEGCP_COMPUTE_DISCOVERY names. It is read once.
func DefaultContract() (*Contract, error) {
	contractOnce.Do(func() {
		var path string
		path, contractErr = discoveryPath()
		if contractErr != nil {
			return
		}
		var doc []byte
		if doc, contractErr = os.ReadFile(path); contractErr != nil {
			contractErr = fmt.Errorf("fakegcp: read the Compute discovery document: %w", contractErr)
			return
		}
		contract, contractErr = ParseContract(doc)
	})
	return contract, contractErr
}

// modulePattern finds the module and version in the path of one of its source files.
var modulePattern = regexp.MustCompile(`(google\.golang\.org/api@v[^/]+)/compute/v1/`)

// discoveryPath finds compute/v1/compute-api.json of the module the client was compiled from:
// the compiled-in path of a source file of package compute names the module's directory (or,
// with -trimpath, its version, looked up in the module cache).
func discoveryPath() (string, error) {
	if p := os.Getenv(DiscoveryEnv); p != "" {
		return p, nil
	}
	fn := runtime.FuncForPC(reflect.ValueOf(compute.NewService).Pointer())
	if fn == nil {
		return "", fmt.Errorf("fakegcp: the Compute client's source is unknown: set %s to compute/v1/compute-api.json", DiscoveryEnv)
	}
	source, _ := fn.FileLine(fn.Entry())
	beside := filepath.Join(filepath.Dir(source), "compute-api.json")
	if _, err := os.Stat(beside); err == nil && filepath.IsAbs(source) {
		return beside, nil
	}
	m := modulePattern.FindStringSubmatch(filepath.ToSlash(source))
	if m == nil {
		return "", fmt.Errorf("fakegcp: the Compute client's source %s names no module version: set %s to compute/v1/compute-api.json", source, DiscoveryEnv)
	}
	tried := []string{beside}
	for _, cache := range moduleCaches() {
		p := filepath.Join(cache, m[1], "compute", "v1", "compute-api.json")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		tried = append(tried, p)
	}
	return "", fmt.Errorf("fakegcp: the Compute discovery document of %s is not in the module cache (tried %s): run `go mod download google.golang.org/api` or set %s",
		m[1], strings.Join(tried, ", "), DiscoveryEnv)
}

// moduleCaches are the places the module cache may be, most specific first; `go env
// GOMODCACHE` is asked only when the environment names none.
func moduleCaches() []string {
	var out []string
	if c := os.Getenv("GOMODCACHE"); c != "" {
		return []string{c}
	}
	for _, p := range filepath.SplitList(os.Getenv("GOPATH")) {
		if p != "" {
			out = append(out, filepath.Join(p, "pkg", "mod"))
		}
	}
	if len(out) > 0 {
		return out
	}
	if b, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
		if c := strings.TrimSpace(string(b)); c != "" {
			out = append(out, c)
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		out = append(out, filepath.Join(home, "go", "pkg", "mod"))
	}
	return out
}
