package oracle

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
)

// CorpusDir is where the recorded transcripts of Gardener's driver live, relative to this
// package's directory.
const CorpusDir = "testdata/gardener"

// Marshal renders a transcript as the corpus keeps it: indented JSON, keys sorted.
func Marshal(tr Transcript) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(tr); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// ReadCorpus reads the recorded transcript of a scenario from dir.
func ReadCorpus(dir, scenario string) (Transcript, error) {
	var tr Transcript
	b, err := os.ReadFile(filepath.Join(dir, scenario+".json"))
	if err != nil {
		return tr, err
	}
	err = json.Unmarshal(b, &tr)
	return tr, err
}

// WriteCorpus writes a transcript into dir.
func WriteCorpus(dir string, tr Transcript) error {
	b, err := Marshal(tr)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, tr.Scenario+".json"), b, 0o644)
}
