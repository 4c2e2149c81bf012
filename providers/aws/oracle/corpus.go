package oracle

import "github.com/machinist-io/machinist/providers/kit/oraclekit"

// CorpusDir is where the recorded transcripts of Gardener's driver live, relative to this
// package's directory.
const CorpusDir = oraclekit.CorpusDir

// ReadCorpus reads Gardener's recorded transcript of a scenario from dir.
func ReadCorpus(dir, scenario string) (Transcript, error) {
	return oraclekit.ReadCorpus[Request, Left](dir, scenario)
}

// WriteCorpus writes a transcript of Gardener's into dir.
func WriteCorpus(dir string, tr Transcript) error { return oraclekit.WriteCorpus(dir, tr) }
