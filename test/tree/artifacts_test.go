package tree

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxTrackedBytes bounds every tracked file outside a testdata/ directory: anything larger is a
// build output, a capture or a dump, and every clone would carry it forever.
const maxTrackedBytes = 1 << 20

// trackedArtifactAllowed names tracked files that may break the rule, each with its reason. It is
// empty: a file that needs an entry has to say here why it cannot be generated or kept in testdata.
var trackedArtifactAllowed = map[string]string{}

// TestNoBuildOutputTracked: git tracks no executable binary and no file over 1 MiB outside
// testdata/ (a merge once committed a 58 MB build of build/benchscale at the root).
func TestNoBuildOutputTracked(t *testing.T) {
	root := repoRoot(t)
	problems, seen := trackedArtifacts(t, root)
	for _, p := range problems {
		t.Error(p)
	}
	if seen < 500 {
		t.Fatalf("git ls-files listed %d files; expected the whole repository", seen)
	}
}

// TestMainPackagesBuildIntoIgnoredPaths: `go build ./build/x` at the root writes ./x; every such
// default output is ignored, so a stray build cannot be committed with `git add -A`.
func TestMainPackagesBuildIntoIgnoredPaths(t *testing.T) {
	root := repoRoot(t)
	cmd := exec.Command("go", "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	mains := strings.Fields(string(out))
	if len(mains) < 3 {
		t.Fatalf("go list found %d main packages: %v", len(mains), mains)
	}
	for _, pkg := range mains {
		name := filepath.Base(pkg)
		check := exec.Command("git", "check-ignore", "-q", "--no-index", name)
		check.Dir = root
		if err := check.Run(); err != nil {
			t.Errorf("go build %s at the root writes ./%s, which .gitignore does not ignore: add /%s", pkg, name, name)
		}
	}
}

// trackedArtifacts returns the tracked files of the repository at root that break the rule, and
// how many files git listed.
func trackedArtifacts(t *testing.T, root string) (problems []string, seen int) {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if rel == "" {
			continue
		}
		seen++
		if inTestdata(rel) {
			continue
		}
		what := artifactKind(filepath.Join(root, rel))
		if what == "" {
			continue
		}
		if _, ok := trackedArtifactAllowed[rel]; ok {
			continue
		}
		problems = append(problems, fmt.Sprintf("%s is %s: build outputs and large files stay out of git (git rm --cached it and ignore it; data for tests goes under testdata/)", rel, what))
	}
	return problems, seen
}

func inTestdata(rel string) bool {
	for _, part := range strings.Split(filepath.ToSlash(rel), "/") {
		if part == "testdata" {
			return true
		}
	}
	return false
}

// binaryMagic are the first bytes of the executable formats Go builds (a Windows executable is
// recognised by its PE header instead: "MZ" alone begins ordinary text too).
var binaryMagic = map[string][]byte{
	"an ELF executable":    []byte("\x7fELF"),
	"a Mach-O executable":  {0xcf, 0xfa, 0xed, 0xfe},
	"a WebAssembly module": []byte("\x00asm"),
}

// isPE reports whether head is the start of a Windows executable: "MZ", and at the offset the DOS
// header names (e_lfanew, at 0x3c), the PE signature.
func isPE(head []byte) bool {
	if len(head) < 0x40 || !bytes.HasPrefix(head, []byte("MZ")) {
		return false
	}
	off := int(binary.LittleEndian.Uint32(head[0x3c:]))
	return off+4 <= len(head) && bytes.Equal(head[off:off+4], []byte("PE\x00\x00"))
}

// artifactKind says why the file at path may not be tracked, or "" when it may. A file deleted in
// the work tree but still in the index is left to git.
func artifactKind(path string) string {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	if fi.Size() > maxTrackedBytes {
		return fmt.Sprintf("%d bytes (over %d)", fi.Size(), maxTrackedBytes)
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	head := make([]byte, 1024)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	for what, magic := range binaryMagic {
		if bytes.HasPrefix(head, magic) {
			return what
		}
	}
	if isPE(head) {
		return "a Windows executable"
	}
	return ""
}

// TestTrackedArtifactsFindsBinaryAndLargeFile runs the check on a small repository holding a
// Linux and a Windows binary, a large file, the same under testdata/ and two ordinary files.
func TestTrackedArtifactsFindsBinaryAndLargeFile(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "main.go"), "package main\n")
	writeFile(t, filepath.Join(dir, "tool"), "\x7fELF\x02\x01\x01 rest of a binary")
	writeFile(t, filepath.Join(dir, "docs/dump.json"), strings.Repeat("x", maxTrackedBytes+1))
	writeFile(t, filepath.Join(dir, "pkg/testdata/tool"), "\x7fELF\x02\x01\x01")
	writeFile(t, filepath.Join(dir, "pkg/testdata/big.json"), strings.Repeat("x", maxTrackedBytes+1))
	writeFile(t, filepath.Join(dir, "README.md"), "MZ is how a text may begin\n"+strings.Repeat(".", 100))
	pe := make([]byte, 0x90)
	copy(pe, "MZ")
	binary.LittleEndian.PutUint32(pe[0x3c:], 0x80)
	copy(pe[0x80:], "PE\x00\x00")
	writeFile(t, filepath.Join(dir, "tool.exe"), string(pe))
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	problems, seen := trackedArtifacts(t, dir)
	joined := strings.Join(problems, "\n")
	if seen != 7 || len(problems) != 3 || !strings.Contains(joined, "tool is an ELF executable") ||
		!strings.Contains(joined, "docs/dump.json is 1048577 bytes") || !strings.Contains(joined, "tool.exe is a Windows executable") {
		t.Fatalf("seen %d, problems:\n%s\nwant tool, tool.exe and docs/dump.json (not README.md, whose text begins with MZ)", seen, joined)
	}
}
