// Command aws is the AWS part of the differential run against Gardener's providers (make
// test-gardener-oracle, test/oracle/run.sh): it runs every scenario of providers/aws/oracle
// through Gardener's AWS driver (an executable the operator supplies) and machinist's, each
// against a fresh fakeaws, checks Gardener's transcripts against the recorded corpus (or writes
// them with -update), and compares the two drivers step by step. It exits 1 when a difference is
// not a documented one, or Gardener's side no longer matches the corpus.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/machinist-io/machinist/providers/aws/oracle"
	"github.com/machinist-io/machinist/providers/kit/oraclekit"
)

func main() {
	gardener := flag.String("gardener-driver", "", "Gardener's driver process: an executable serving the oracle's JSON-lines protocol (docs/compatibility/aws.md)")
	corpus := flag.String("corpus", filepath.Join("providers", "aws", "oracle", oracle.CorpusDir), "the recorded corpus of Gardener's transcripts")
	update := flag.Bool("update", false, "write Gardener's transcripts into the corpus instead of checking them")
	out := flag.String("out", "", "also write both drivers' transcripts and Gardener's logs into this directory")
	run := flag.String("run", "", "only the scenarios whose name matches this regular expression")
	flag.Parse()
	if *gardener == "" {
		fmt.Fprintln(os.Stderr, "oracle: -gardener-driver is required: an executable serving the oracle's JSON-lines protocol (docs/compatibility/aws.md)")
		os.Exit(2)
	}
	match := regexp.MustCompile(*run)
	failed := 0
	for _, s := range oracle.Scenarios {
		if !match.MatchString(s.Name) {
			continue
		}
		problems, err := scenario(s, *gardener, *corpus, *out, *update)
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAIL %s: %v\n", s.Name, err)
			failed++
			continue
		}
		if len(problems) > 0 {
			failed++
			fmt.Printf("FAIL %s\n", s.Name)
			for _, p := range problems {
				fmt.Printf("    %s\n", p)
			}
			continue
		}
		fmt.Printf("ok   %s\n", s.Name)
	}
	if failed > 0 {
		fmt.Printf("%d scenarios differ\n", failed)
		os.Exit(1)
	}
}

// scenario runs one scenario through both drivers and returns what differs.
func scenario(s oracle.Scenario, gardenerPath, corpus, out string, update bool) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	logs := io.Discard
	if out != "" {
		f, err := os.Create(filepath.Join(out, s.Name+".gardener.log"))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		logs = f
	}
	gtr, err := runGardener(ctx, s, gardenerPath, logs)
	if err != nil {
		return nil, err
	}
	mtr, err := runMachinist(ctx, s)
	if err != nil {
		return nil, err
	}
	if out != "" {
		for _, tr := range []oracle.Transcript{gtr, mtr} {
			b, _ := oraclekit.Marshal(tr)
			if err := os.WriteFile(filepath.Join(out, s.Name+"."+tr.Driver+".json"), b, 0o644); err != nil {
				return nil, err
			}
		}
	}
	var problems []string
	if update {
		if err := oracle.WriteCorpus(corpus, gtr); err != nil {
			return nil, err
		}
	} else {
		recorded, err := oracle.ReadCorpus(corpus, s.Name)
		if err != nil {
			return nil, fmt.Errorf("the corpus has no transcript of it (run with -update to record it): %w", err)
		}
		for _, d := range oracle.SameTranscript(recorded, gtr) {
			problems = append(problems, "Gardener's driver no longer answers as recorded: "+d)
		}
	}
	for _, m := range oracle.Compare(s, gtr, mtr).Mismatches {
		problems = append(problems, m.String())
	}
	return problems, nil
}

// runGardener runs the scenario through Gardener's driver; its log goes to logs.
func runGardener(ctx context.Context, s oracle.Scenario, path string, logs io.Writer) (oracle.Transcript, error) {
	cloud := oracle.NewCloud()
	srv, err := oracle.Serve(cloud)
	if err != nil {
		return oracle.Transcript{}, err
	}
	defer func() { _ = srv.Close() }()
	g, err := oracle.StartGardener(path, srv.URL, logs)
	if err != nil {
		return oracle.Transcript{}, err
	}
	tr, err := oracle.Run(ctx, s, cloud, g, "gardener")
	if cerr := g.Close(); err == nil {
		err = cerr
	}
	return tr, err
}

// runMachinist runs the scenario through machinist's driver.
func runMachinist(ctx context.Context, s oracle.Scenario) (oracle.Transcript, error) {
	cloud := oracle.NewCloud()
	srv, err := oracle.Serve(cloud)
	if err != nil {
		return oracle.Transcript{}, err
	}
	defer func() { _ = srv.Close() }()
	// The SDK's own wait between attempts, as Gardener's client has it.
	return oracle.Run(ctx, s, cloud, oracle.NewMachinist(srv.URL, 20*time.Second), "machinist")
}
