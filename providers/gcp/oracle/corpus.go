package oracle

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// CorpusDir is where the corpus of Gardener's transcripts lives, relative to this package.
const CorpusDir = "testdata/gardener"

// ReadCorpus reads Gardener's recorded transcript of a scenario from dir.
func ReadCorpus(dir, scenario string) (Transcript, error) {
	b, err := os.ReadFile(filepath.Join(dir, scenario+".json"))
	if err != nil {
		return Transcript{}, fmt.Errorf("oracle: the corpus has no transcript of %s: %w", scenario, err)
	}
	var tr Transcript
	if err := json.Unmarshal(b, &tr); err != nil {
		return Transcript{}, fmt.Errorf("oracle: the corpus's %s: %w", scenario, err)
	}
	if tr.Driver != Gardener || tr.Scenario != scenario {
		return Transcript{}, fmt.Errorf("oracle: the corpus's %s is %s's transcript of %s", scenario, tr.Driver, tr.Scenario)
	}
	return tr, nil
}

// WriteCorpus writes a transcript of Gardener's into dir.
func WriteCorpus(dir string, tr Transcript) error {
	b, err := Marshal(tr)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, tr.Scenario+".json"), b, 0o644)
}
