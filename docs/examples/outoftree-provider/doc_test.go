package main

import (
	"bytes"
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestDocStatesTheExampleSize keeps the line counts docs/writing-a-provider.md quotes for this
// example true.
func TestDocStatesTheExampleSize(t *testing.T) {
	doc, err := os.ReadFile("../../writing-a-provider.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		claim string // a regexp with one group: the number the page states
		files []string
	}{
		{`\*\*(\d+) lines of provider code\*\*`, []string{"jsoncloud/driver.go", "jsoncloud/spec.go", "jsoncloud/cloud.go"}},
		{`the (\d+)-line file store`, []string{"jsoncloud/cloud.go"}},
		{`\*\*(\d+)-line main\*\*`, []string{"main.go"}},
		{`\*\*(\d+) lines of tests\*\*`, []string{"jsoncloud/conformance_test.go", "jsoncloud/jsoncloudtest/target.go", "main_test.go"}},
	} {
		m := regexp.MustCompile(c.claim).FindSubmatch(doc)
		if m == nil {
			t.Errorf("docs/writing-a-provider.md no longer states %s", c.claim)
			continue
		}
		lines := 0
		for _, f := range c.files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			lines += bytes.Count(b, []byte("\n"))
		}
		if stated, _ := strconv.Atoi(string(m[1])); stated != lines {
			t.Errorf("docs/writing-a-provider.md says %s for %v; they have %d lines: update the page", m[0], c.files, lines)
		}
	}
}
