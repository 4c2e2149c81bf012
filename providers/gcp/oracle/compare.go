package oracle

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/machinist-io/machinist/providers/kit/oraclekit"
)

// Compare compares Gardener's and machinist's transcripts of a scenario step by step: after the
// documented Differences have rewritten both exchanges of a step to their common form, the
// answers (code, provider ID, node name, listed machines) and the requests (method, Compute
// method, path, query, body field by field, status, in order) must be equal, and so must what
// the scenario left in the fake. It returns what still differs, and the IDs of the Differences
// it applied.
func Compare(s Scenario, g, m Transcript) (problems, applied []string) {
	if len(g.Steps) != len(m.Steps) {
		return []string{fmt.Sprintf("gardener ran %d steps, machinist %d", len(g.Steps), len(m.Steps))}, nil
	}
	for i := range g.Steps {
		ge, me := clone(g.Steps[i]), clone(m.Steps[i])
		for _, d := range Differences {
			if d.Apply(s.Steps[i], &ge, &me) && !slices.Contains(applied, d.ID) {
				applied = append(applied, d.ID)
			}
		}
		for _, p := range compareExchange(ge, me) {
			problems = append(problems, g.Steps[i].Step+": "+p)
		}
	}
	if !slices.Equal(g.Left.Instances, m.Left.Instances) || !slices.Equal(g.Left.Disks, m.Left.Disks) {
		problems = append(problems, fmt.Sprintf("left: gardener %+v, machinist %+v", g.Left, m.Left))
	}
	return problems, applied
}

// compareExchange lists how two rewritten exchanges differ.
func compareExchange(g, m Exchange) []string {
	var out []string
	gr, mr := g.Result, m.Result
	if gr.Code != mr.Code || gr.ProviderID != mr.ProviderID || gr.NodeName != mr.NodeName || !maps.Equal(gr.MachineList, mr.MachineList) {
		out = append(out, fmt.Sprintf("answers: gardener %s, machinist %s", answer(gr), answer(mr)))
	}
	n := max(len(g.Requests), len(m.Requests))
	for i := range n {
		switch {
		case i >= len(g.Requests):
			out = append(out, fmt.Sprintf("request %d: only machinist: %s", i+1, line(m.Requests[i])))
		case i >= len(m.Requests):
			out = append(out, fmt.Sprintf("request %d: only gardener: %s", i+1, line(g.Requests[i])))
		case line(g.Requests[i]) != line(m.Requests[i]):
			out = append(out, fmt.Sprintf("request %d: gardener %s, machinist %s", i+1, line(g.Requests[i]), line(m.Requests[i])))
		default:
			for _, d := range bodyDiff(g.Requests[i].Body, m.Requests[i].Body) {
				out = append(out, fmt.Sprintf("request %d (%s) body: %s", i+1, g.Requests[i].Op, d))
			}
		}
	}
	return out
}

// line is a request without its body.
func line(r Request) string {
	s := fmt.Sprintf("%s %s %s", r.Method, r.Path, r.Op)
	if r.Query != "" {
		s += " ?" + r.Query
	}
	return fmt.Sprintf("%s -> %d", s, r.Status)
}

// answer is a driver's answer without its message.
func answer(r oraclekit.Result) string {
	s := r.Code
	if r.ProviderID != "" {
		s += " " + r.ProviderID
	}
	if r.NodeName != "" {
		s += " node " + r.NodeName
	}
	if r.MachineList != nil {
		b, _ := json.Marshal(r.MachineList)
		s += " list " + string(b)
	}
	return s
}

// bodyDiff lists the fields two bodies differ in, as path: gardener value, machinist value.
func bodyDiff(g, m map[string]any) []string {
	gf, mf := map[string]string{}, map[string]string{}
	flatten("", g, gf)
	flatten("", m, mf)
	var out []string
	for _, k := range slices.Sorted(maps.Keys(gf)) {
		if mv, ok := mf[k]; !ok {
			out = append(out, fmt.Sprintf("%s: gardener %s, machinist does not send it", k, gf[k]))
		} else if mv != gf[k] {
			out = append(out, fmt.Sprintf("%s: gardener %s, machinist %s", k, gf[k], mv))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(mf)) {
		if _, ok := gf[k]; !ok {
			out = append(out, fmt.Sprintf("%s: gardener does not send it, machinist %s", k, mf[k]))
		}
	}
	return out
}

// clone deep-copies an exchange, so rewriting it leaves the transcript alone.
func clone(e Exchange) Exchange {
	b, _ := json.Marshal(e)
	var out Exchange
	_ = json.Unmarshal(b, &out)
	return out
}

// Check compares a transcript of Gardener's driver with the corpus's: the requests and the
// answers but their messages (which name operations and times) must be equal.
func Check(got, want Transcript) []string {
	var out []string
	if len(got.Steps) != len(want.Steps) {
		return []string{fmt.Sprintf("%d steps, the corpus has %d", len(got.Steps), len(want.Steps))}
	}
	for i := range got.Steps {
		g, w := got.Steps[i], want.Steps[i]
		g.Result.Message, w.Result.Message = "", ""
		for _, p := range compareExchange(w, g) {
			out = append(out, g.Step+": "+strings.NewReplacer("gardener", "corpus", "machinist", "now").Replace(p))
		}
	}
	if !slices.Equal(got.Left.Instances, want.Left.Instances) || !slices.Equal(got.Left.Disks, want.Left.Disks) {
		out = append(out, fmt.Sprintf("left %+v, the corpus %+v", got.Left, want.Left))
	}
	return out
}
