package oracle

import "github.com/machinist-io/machinist/providers/kit/oraclekit"

// CorpusDir is where the corpus of Gardener's transcripts lives, relative to this package.
const CorpusDir = oraclekit.CorpusDir

// ReadCorpus reads Gardener's recorded transcript of a scenario from dir.
func ReadCorpus(dir, scenario string) (Transcript, error) {
	return oraclekit.ReadCorpus[Request, Left](dir, scenario)
}

// WriteCorpus writes a transcript of Gardener's into dir (oraclekit.Marshal's form).
func WriteCorpus(dir string, tr Transcript) error { return oraclekit.WriteCorpus(dir, tr) }
