package main

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"go/format"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/machinist-io/machinist/core/registry"
)

// modulePath is the import path generated code imports core from.
const modulePath = "github.com/machinist-io/machinist"

//go:embed templates/*.tmpl
var templates embed.FS

// reserved names cannot name a provider although registry.ValidName accepts them.
var reserved = map[string]string{
	"all":      "providers/all is the generated package that links providers in",
	"doc":      "providers/all/doc.go is generated; a provider named doc would overwrite it",
	"main":     "a package named main is a command and cannot be imported by providers/all",
	"mem":      "mem is the in-memory reference driver (core/drivertest/memdriver) tests register",
	"internal": "the go tool restricts who may import an internal directory",
	"testdata": "the go tool ignores testdata directories",
	"vendor":   "the go tool treats vendor directories specially",
}

// ValidateName reports why name cannot name a new provider under dir, in a message that says
// what to do instead, or nil.
func ValidateName(dir, name string) error {
	if !registry.ValidName(name) {
		hint := strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
				return r
			case r >= 'A' && r <= 'Z':
				return r + 'a' - 'A'
			}
			return -1
		}, name)
		msg := fmt.Sprintf("newprovider: invalid provider name %q: use lower-case letters and digits, starting with a letter (it is also the package name, the build tag provider_<name> and the MachineClass.provider value)", name)
		if registry.ValidName(hint) {
			msg += fmt.Sprintf("; e.g. NAME=%s", hint)
		}
		return errors.New(msg)
	}
	if token.IsKeyword(name) {
		return fmt.Errorf("newprovider: invalid provider name %q: it is a Go keyword and cannot name a package; choose another name", name)
	}
	if why, ok := reserved[name]; ok {
		return fmt.Errorf("newprovider: provider name %q is reserved (%s); choose another name", name, why)
	}
	target := filepath.Join(dir, name)
	if _, err := os.Lstat(target); err == nil {
		return fmt.Errorf("newprovider: %s already exists: choose another name, or delete the directory first if you mean to start over", target)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("newprovider: check %s: %w", target, err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("newprovider: %s is not a directory: run from the repository root or pass -dir", dir)
	}
	return nil
}

// Data is what the templates see.
type Data struct {
	// Name is the provider's name, package name and build-tag suffix.
	Name string
	// Module is the import path of this repository.
	Module string
}

// Result describes a generated provider.
type Result struct {
	Name string
	// Dir is the provider's directory.
	Dir string
	// Files are the generated file names, sorted.
	Files []string
	// Lines is the number of lines generated.
	Lines int
}

// Render returns the provider's files by name, Go files gofmt-ed.
func Render(name string) (map[string][]byte, error) {
	paths, err := fs.Glob(templates, "templates/*.tmpl")
	if err != nil {
		return nil, err
	}
	data := Data{Name: name, Module: modulePath}
	files := make(map[string][]byte, len(paths))
	for _, p := range paths {
		tmpl, err := template.New(filepath.Base(p)).Option("missingkey=error").ParseFS(templates, p)
		if err != nil {
			return nil, fmt.Errorf("newprovider: parse %s: %w", p, err)
		}
		var buf bytes.Buffer
		if err := tmpl.Execute(&buf, data); err != nil {
			return nil, fmt.Errorf("newprovider: render %s: %w", p, err)
		}
		out := strings.TrimSuffix(filepath.Base(p), ".tmpl")
		content := buf.Bytes()
		if strings.HasSuffix(out, ".go") {
			if content, err = format.Source(content); err != nil {
				return nil, fmt.Errorf("newprovider: template %s does not render valid Go: %w", p, err)
			}
		}
		files[out] = content
	}
	return files, nil
}

// Generate writes providers/<name>/ under dir. It writes into a temporary directory first and
// renames it into place, so a failure leaves nothing behind.
func Generate(dir, name string) (*Result, error) {
	if err := ValidateName(dir, name); err != nil {
		return nil, err
	}
	files, err := Render(name)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(dir, "."+name+"-newprovider-")
	if err != nil {
		return nil, fmt.Errorf("newprovider: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	res := &Result{Name: name, Dir: filepath.Join(dir, name)}
	for fname, content := range files {
		if err := os.WriteFile(filepath.Join(tmp, fname), content, 0o644); err != nil {
			return nil, fmt.Errorf("newprovider: %w", err)
		}
		res.Files = append(res.Files, fname)
		res.Lines += bytes.Count(content, []byte("\n"))
	}
	sort.Strings(res.Files)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("newprovider: %w", err)
	}
	if err := os.Rename(tmp, res.Dir); err != nil {
		return nil, fmt.Errorf("newprovider: create %s: %w", res.Dir, err)
	}
	return res, nil
}
