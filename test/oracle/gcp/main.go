// Command gcp is the GCP part of the differential run against Gardener's providers (make
// test-gardener-oracle, test/oracle/run.sh): it runs every scenario of
// providers/gcp/oracle through Gardener's GCP driver (an executable the operator supplies, serving
// the oracle's JSON-lines protocol: docs/compatibility/gcp.md) and machinist's, each against a
// fresh fakegcp, checks Gardener's transcripts against the recorded corpus (or writes them with
// -update), and compares the two drivers step by step. It exits 1 when a difference is not a
// documented one, a documented one no longer occurs, or Gardener's side no longer matches the
// corpus.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"github.com/machinist-io/machinist/providers/gcp/oracle"
	"github.com/machinist-io/machinist/providers/kit/oraclekit"
)

func main() {
	gardener := flag.String("gardener-driver", "", "Gardener's driver: an executable serving the oracle's JSON-lines protocol (ORACLE_GCP_DRIVER of test/oracle/run.sh)")
	corpus := flag.String("corpus", filepath.Join("providers", "gcp", "oracle", oracle.CorpusDir), "the recorded corpus of Gardener's transcripts")
	update := flag.Bool("update", false, "write Gardener's transcripts into the corpus instead of checking them")
	out := flag.String("out", "", "also write both drivers' transcripts into this directory")
	run := flag.String("run", "", "only the scenarios whose name matches this regular expression")
	flag.Parse()
	if *gardener == "" {
		fmt.Fprintln(os.Stderr, "oracle: -gardener-driver is required: Gardener's driver behind the oracle's JSON-lines protocol (docs/compatibility/gcp.md)")
		os.Exit(2)
	}
	match, err := regexp.Compile(*run)
	if err != nil {
		fmt.Fprintf(os.Stderr, "oracle: -run: %v\n", err)
		os.Exit(2)
	}
	failed, ran := 0, 0
	var applied []string
	start := time.Now()
	for _, s := range oracle.Scenarios {
		if !match.MatchString(s.Name) {
			continue
		}
		ran++
		problems, used, err := scenario(s, *gardener, *corpus, *out, *update)
		for _, id := range used {
			if !slices.Contains(applied, id) {
				applied = append(applied, id)
			}
		}
		switch {
		case err != nil:
			fmt.Printf("FAIL %s: %v\n", s.Name, err)
			failed++
		case len(problems) > 0:
			fmt.Printf("FAIL %s\n", s.Name)
			for _, p := range problems {
				fmt.Printf("    %s\n", p)
			}
			failed++
		default:
			fmt.Printf("ok   %s\n", s.Name)
		}
	}
	if *run == "" {
		for _, d := range oracle.Differences {
			if !slices.Contains(applied, d.ID) {
				fmt.Printf("FAIL documented difference %s occurred in no scenario: remove it (and its entry in docs/compatibility/gcp.md)\n", d.ID)
				failed++
			}
		}
	}
	fmt.Printf("%d scenarios in %s against Gardener's provider-gcp (differences read at %s); %d documented differences applied\n",
		ran, time.Since(start).Round(time.Second), oracle.GardenerCommit, len(applied))
	if failed > 0 {
		fmt.Printf("%d failures\n", failed)
		os.Exit(1)
	}
}

// scenario runs one scenario through both drivers and returns what differs and the documented
// differences it applied.
func scenario(s oracle.Scenario, gardenerPath, corpus, out string, update bool) (problems, applied []string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	gtr, err := oracle.Run(ctx, s, oraclekit.Gardener, func(w *oracle.World) (oraclekit.Target, error) { return oracle.NewGardener(gardenerPath, w) })
	if err != nil {
		return nil, nil, err
	}
	mtr, err := oracle.Run(ctx, s, oraclekit.Machinist, func(*oracle.World) (oraclekit.Target, error) { return oracle.NewMachinist(), nil })
	if err != nil {
		return nil, nil, err
	}
	if out != "" {
		for _, tr := range []oracle.Transcript{gtr, mtr} {
			b, err := oraclekit.Marshal(tr)
			if err != nil {
				return nil, nil, err
			}
			if err := os.WriteFile(filepath.Join(out, s.Name+"."+tr.Driver+".json"), b, 0o600); err != nil {
				return nil, nil, err
			}
		}
	}
	if update {
		if err := oracle.WriteCorpus(corpus, gtr); err != nil {
			return nil, nil, err
		}
	} else {
		want, err := oracle.ReadCorpus(corpus, s.Name)
		if err != nil {
			return nil, nil, err
		}
		for _, p := range oracle.Check(gtr, want) {
			problems = append(problems, "corpus: "+p)
		}
	}
	diffs, applied := oracle.Compare(s, gtr, mtr)
	return append(problems, diffs...), applied, nil
}
