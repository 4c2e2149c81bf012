package oraclekit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// CorpusDir is where the recorded transcripts of Gardener's driver live, relative to a cloud's
// oracle package.
const CorpusDir = "testdata/gardener"

// Marshal renders a transcript as the corpus keeps it: indented JSON, keys sorted, no HTML
// escapes.
func Marshal(tr any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(tr); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// ReadCorpus reads Gardener's recorded transcript of a scenario from dir.
func ReadCorpus[R, L any](dir, scenario string) (Transcript[R, L], error) {
	var tr Transcript[R, L]
	b, err := os.ReadFile(filepath.Join(dir, scenario+".json"))
	if err != nil {
		return tr, fmt.Errorf("oracle: the corpus has no transcript of %s: %w", scenario, err)
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		return tr, fmt.Errorf("oracle: the corpus's %s: %w", scenario, err)
	}
	if tr.Driver != Gardener || tr.Scenario != scenario {
		return tr, fmt.Errorf("oracle: the corpus's %s is %s's transcript of %s", scenario, tr.Driver, tr.Scenario)
	}
	return tr, nil
}

// WriteCorpus writes a transcript of Gardener's into dir.
func WriteCorpus[R, L any](dir string, tr Transcript[R, L]) error {
	b, err := Marshal(tr)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, tr.Scenario+".json"), b, 0o644)
}
