// Package docker holds the Dockerfiles of machinist's images and `make image`'s script; its
// tests check that they refer only to what exists.
package docker

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction with its continuation lines joined.
type instruction struct {
	line    int
	keyword string // upper case
	args    string
}

// stage is one FROM ... AS name section.
type stage struct {
	name string
	base string // image reference as written
	args map[string]string
	envs map[string]bool
	body []instruction
}

// dockerfile is a parsed Dockerfile.
type dockerfile struct {
	path       string
	globalArgs map[string]string // ARGs before the first FROM, with their defaults
	stages     []*stage
}

// automaticArgs are the platform ARGs BuildKit and buildah predefine.
var automaticArgs = map[string]bool{
	"BUILDPLATFORM": true, "BUILDOS": true, "BUILDARCH": true, "BUILDVARIANT": true,
	"TARGETPLATFORM": true, "TARGETOS": true, "TARGETARCH": true, "TARGETVARIANT": true,
}

func parseDockerfile(t *testing.T, path string) *dockerfile {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var insts []instruction
	var cur strings.Builder
	start := 0
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue // comments may sit inside a continuation too
		}
		if cur.Len() == 0 {
			start = n
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		keyword, args, _ := strings.Cut(cur.String(), " ")
		insts = append(insts, instruction{line: start, keyword: strings.ToUpper(keyword), args: strings.TrimSpace(args)})
		cur.Reset()
	}
	if cur.Len() > 0 {
		t.Fatalf("%s: the last instruction ends with a line continuation", path)
	}
	df := &dockerfile{path: path, globalArgs: map[string]string{}}
	for _, in := range insts {
		switch {
		case in.keyword == "FROM":
			fields := strings.Fields(in.args)
			var rest []string
			for _, f := range fields {
				if !strings.HasPrefix(f, "--") {
					rest = append(rest, f)
				}
			}
			st := &stage{base: rest[0], args: map[string]string{}, envs: map[string]bool{}}
			if len(rest) == 3 && strings.EqualFold(rest[1], "AS") {
				st.name = rest[2]
			} else if len(rest) != 1 {
				t.Fatalf("%s:%d: cannot read FROM %s", path, in.line, in.args)
			}
			df.stages = append(df.stages, st)
			st.body = append(st.body, in)
		case len(df.stages) == 0:
			if in.keyword != "ARG" {
				t.Fatalf("%s:%d: %s before the first FROM", path, in.line, in.keyword)
			}
			name, def, _ := strings.Cut(in.args, "=")
			df.globalArgs[name] = def
		default:
			st := df.stages[len(df.stages)-1]
			st.body = append(st.body, in)
			switch in.keyword {
			case "ARG":
				name, def, _ := strings.Cut(in.args, "=")
				st.args[name] = def
			case "ENV":
				for _, kv := range strings.Fields(in.args) {
					if k, _, ok := strings.Cut(kv, "="); ok {
						st.envs[k] = true
					}
				}
			}
		}
	}
	if len(df.stages) == 0 {
		t.Fatalf("%s has no FROM", path)
	}
	return df
}

func (df *dockerfile) stage(name string) *stage {
	for _, s := range df.stages {
		if s.name == name {
			return s
		}
	}
	return nil
}

var varRef = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`)

// expand substitutes ${NAME} with values, for reading a FROM line.
func expand(s string, values map[string]string) string {
	return varRef.ReplaceAllStringFunc(strings.ReplaceAll(s, "}", ""), func(m string) string {
		return values[varRef.FindStringSubmatch(m)[1]]
	})
}

const repoRoot = "../.."

// dockerfiles are the Dockerfiles and the final stage `make image` builds of each.
var dockerfiles = map[string]string{
	"provider.Dockerfile":   "slim",
	"all-in-one.Dockerfile": "all-in-one",
}

func TestDockerfilesReferOnlyToWhatExists(t *testing.T) {
	found, _ := filepath.Glob("*.Dockerfile")
	if len(found) != len(dockerfiles) {
		t.Errorf("build/docker holds %v; the test knows %d Dockerfiles: add the new one to dockerfiles", found, len(dockerfiles))
	}
	for file, final := range dockerfiles {
		t.Run(file, func(t *testing.T) {
			df := parseDockerfile(t, file)
			ignore := readIgnore(t, file+".dockerignore")
			seen := map[string]bool{}
			for i, st := range df.stages {
				for _, ref := range varRef.FindAllStringSubmatch(st.body[0].args, -1) {
					if _, ok := df.globalArgs[ref[1]]; !ok && !automaticArgs[ref[1]] {
						t.Errorf("%s: FROM uses $%s, which no ARG before the first FROM declares", file, ref[1])
					}
				}
				for _, in := range st.body[1:] {
					checkVars(t, file, st, in)
					if in.keyword == "COPY" || in.keyword == "ADD" {
						checkCopy(t, file, seen, ignore, in)
					}
				}
				if st.name != "" {
					if seen[st.name] {
						t.Errorf("%s: stage %s is declared twice", file, st.name)
					}
					seen[st.name] = true
				}
				if i == len(df.stages)-1 {
					checkFinalStage(t, df, st, final)
				}
			}
			checkGoBuild(t, df, file)
		})
	}
}

// checkVars fails on a variable the instruction uses that its stage does not declare: a global
// ARG is visible only in FROM unless the stage declares it again.
func checkVars(t *testing.T, file string, st *stage, in instruction) {
	t.Helper()
	for _, ref := range varRef.FindAllStringSubmatch(in.args, -1) {
		name := ref[1]
		if _, ok := st.args[name]; ok || st.envs[name] {
			continue
		}
		t.Errorf("%s:%d: %s uses $%s, which stage %q neither declares with ARG nor ENV", file, in.line, in.keyword, name, st.name)
	}
}

// checkCopy fails on a COPY from a stage that is not declared before it, or of a path that does
// not exist in the repository or that the build context leaves out.
func checkCopy(t *testing.T, file string, stages map[string]bool, ignore []ignoreRule, in instruction) {
	t.Helper()
	var paths []string
	from := ""
	for _, f := range strings.Fields(in.args) {
		if v, ok := strings.CutPrefix(f, "--from="); ok {
			from = v
			continue
		}
		if strings.HasPrefix(f, "--") {
			continue
		}
		paths = append(paths, f)
	}
	if len(paths) < 2 {
		t.Errorf("%s:%d: COPY needs a source and a destination: %s", file, in.line, in.args)
		return
	}
	if from != "" {
		if !stages[from] {
			t.Errorf("%s:%d: COPY --from=%s: no earlier stage has that name", file, in.line, from)
		}
		return
	}
	for _, src := range paths[:len(paths)-1] {
		clean := strings.TrimSuffix(src, "/")
		if _, err := os.Stat(filepath.Join(repoRoot, clean)); err != nil {
			t.Errorf("%s:%d: COPY %s: no such path in the repository", file, in.line, src)
			continue
		}
		if excluded(ignore, clean) {
			t.Errorf("%s:%d: COPY %s: %s.dockerignore leaves it out of the build context", file, in.line, src, file)
		}
	}
}

func checkFinalStage(t *testing.T, df *dockerfile, st *stage, want string) {
	t.Helper()
	if st.name != want {
		t.Errorf("%s: the final stage is %q, want %q (the --target make image builds)", df.path, st.name, want)
	}
	defaults := map[string]string{}
	for k, v := range df.globalArgs {
		defaults[k] = v
	}
	base := expand(st.base, defaults)
	if base != "scratch" && !strings.HasPrefix(base, "gcr.io/distroless/static") {
		t.Errorf("%s: the final stage is based on %q, want a minimal base (distroless/static or scratch)", df.path, base)
	}
	user := ""
	for _, in := range st.body {
		if in.keyword == "USER" {
			user = in.args
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if uid == "" || uid == "0" || uid == "root" {
		t.Errorf("%s: the final stage runs as %q, want a non-root USER", df.path, user)
	}
	entry := false
	for _, in := range st.body {
		entry = entry || in.keyword == "ENTRYPOINT" && strings.Contains(in.args, "/usr/local/bin/machinist")
	}
	if !entry {
		t.Errorf("%s: the final stage has no ENTRYPOINT running the copied machinist binary", df.path)
	}
}

// checkGoBuild finds the go build of the binary and checks it is static, builds the command
// that exists, and selects one provider in the slim image.
func checkGoBuild(t *testing.T, df *dockerfile, file string) {
	t.Helper()
	build := df.stage("build")
	if build == nil {
		t.Fatalf("%s: no stage named build", file)
	}
	var run string
	for _, in := range build.body {
		if in.keyword == "RUN" && strings.Contains(in.args, "go build") {
			run = in.args
		}
	}
	switch {
	case run == "":
		t.Fatalf("%s: the build stage runs no go build", file)
	case !strings.Contains(run, "CGO_ENABLED=0"):
		t.Errorf("%s: go build without CGO_ENABLED=0 is not a static binary: %s", file, run)
	case !strings.Contains(run, "./cmd/machinist"):
		t.Errorf("%s: go build does not build ./cmd/machinist: %s", file, run)
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "cmd", "machinist")); err != nil {
		t.Errorf("%s builds ./cmd/machinist: %v", file, err)
	}
	if m := regexp.MustCompile(`-X (\S+)\.Version=`).FindStringSubmatch(run); m != nil {
		pkg := strings.TrimPrefix(m[1], "github.com/machinist-io/machinist/")
		if _, err := os.Stat(filepath.Join(repoRoot, pkg)); err != nil {
			t.Errorf("%s stamps the version into %s: %v", file, m[1], err)
		}
	}
	slim := strings.Contains(run, `-tags "provider_${PROVIDER}"`)
	if want := file == "provider.Dockerfile"; slim != want {
		t.Errorf("%s: builds with -tags provider_${PROVIDER} = %v, want %v: %s", file, slim, want, run)
	}
	goVersion := df.globalArgs["GO_VERSION"]
	modVersion := goDirective(t)
	if goVersion == "" || !versionAtLeast(goVersion, modVersion) {
		t.Errorf("%s: GO_VERSION=%q is older than go.mod's go %s", file, goVersion, modVersion)
	}
}

func goDirective(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	return string(m[1])
}

// versionAtLeast compares dotted Go versions numerically.
func versionAtLeast(have, want string) bool {
	h, w := strings.Split(have, "."), strings.Split(want, ".")
	for i := 0; i < len(w); i++ {
		var hv, wv int
		if i < len(h) {
			fmt.Sscan(h[i], &hv)
		}
		fmt.Sscan(w[i], &wv)
		if hv != wv {
			return hv > wv
		}
	}
	return true
}

// ignoreRule is one line of a .dockerignore file.
type ignoreRule struct {
	pattern string
	negate  bool
}

func readIgnore(t *testing.T, path string) []ignoreRule {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("every Dockerfile needs a %s next to it (the context is the repository root): %v", path, err)
	}
	var rules []ignoreRule
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r := ignoreRule{}
		if p, ok := strings.CutPrefix(line, "!"); ok {
			r.negate, line = true, p
		}
		r.pattern = strings.TrimSuffix(line, "/")
		rules = append(rules, r)
	}
	return rules
}

// excluded applies .dockerignore semantics to a path: a rule matches the path or any parent, the
// last matching rule wins, and a leading **/ matches at any depth.
func excluded(rules []ignoreRule, path string) bool {
	out := false
	for _, r := range rules {
		if matchesOrParent(r.pattern, path) {
			out = !r.negate
		}
	}
	return out
}

func matchesOrParent(pattern, path string) bool {
	parts := strings.Split(path, "/")
	for i := len(parts); i > 0; i-- {
		p := strings.Join(parts[:i], "/")
		if sub, ok := strings.CutPrefix(pattern, "**/"); ok {
			for j := 0; j < i; j++ {
				if ok, _ := filepath.Match(sub, strings.Join(parts[j:i], "/")); ok {
					return true
				}
			}
			continue
		}
		if ok, _ := filepath.Match(pattern, p); ok {
			return true
		}
	}
	return false
}

func TestIgnoreRules(t *testing.T) {
	rules := []ignoreRule{{pattern: "*"}, {pattern: "cmd", negate: true}, {pattern: "**/*_test.go"}, {pattern: "**/testdata"}}
	for path, want := range map[string]bool{
		"bin/etcd": true, "go.mod": true, "cmd": false, "cmd/machinist/main.go": false,
		"cmd/machinist/main_test.go": true, "cmd/x/testdata/a.yaml": true,
	} {
		if got := excluded(rules, path); got != want {
			t.Errorf("excluded(%s) = %v, want %v", path, got, want)
		}
	}
}
