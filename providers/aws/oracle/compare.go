package oracle

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
)

// Mismatch is a difference between the two drivers that no Difference explains.
type Mismatch struct {
	Scenario, Step string
	What           string
}

func (m Mismatch) String() string { return m.Step + ": " + m.What }

// SameTranscript lists where two transcripts of one driver differ (the recorded corpus and a
// new run): results, requests and what was left.
func SameTranscript(want, got Transcript) []string {
	var out []string
	if len(want.Steps) != len(got.Steps) {
		return []string{fmt.Sprintf("%d steps, recorded %d", len(got.Steps), len(want.Steps))}
	}
	for i := range want.Steps {
		w, g := want.Steps[i], got.Steps[i]
		if !reflect.DeepEqual(w.Result, g.Result) {
			out = append(out, fmt.Sprintf("%s: result %s, recorded %s", w.Step, show(g.Result), show(w.Result)))
		}
		if !sameRequests(w.Requests, g.Requests) {
			out = append(out, fmt.Sprintf("%s: requests %s, recorded %s", w.Step, show(g.Requests), show(w.Requests)))
		}
	}
	if want.Left != got.Left {
		out = append(out, fmt.Sprintf("left %+v, recorded %+v", got.Left, want.Left))
	}
	return out
}

func sameRequests(a, b []Request) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Action != b[i].Action || a[i].Code != b[i].Code || !reflect.DeepEqual(nonNil(a[i].Params), nonNil(b[i].Params)) {
			return false
		}
	}
	return true
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func show(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Comparison is the outcome of Compare: what no Difference explains, and how often each
// Difference was needed.
type Comparison struct {
	Mismatches []Mismatch
	Used       map[string]int
}

// Compare compares Gardener's transcript of a scenario with machinist's: step by step, after
// rewriting both with every Difference, the results (code, provider ID, node, list; not the
// messages) and the requests (action, answer code, parameters, order) must be equal, and so must
// what was left in the fake.
func Compare(s Scenario, gardener, machinist Transcript) Comparison {
	c := Comparison{Used: map[string]int{}}
	miss := func(step, format string, args ...any) {
		c.Mismatches = append(c.Mismatches, Mismatch{Scenario: s.Name, Step: step, What: fmt.Sprintf(format, args...)})
	}
	if len(gardener.Steps) != len(s.Steps) || len(machinist.Steps) != len(s.Steps) {
		miss("", "%d steps, Gardener ran %d and machinist %d", len(s.Steps), len(gardener.Steps), len(machinist.Steps))
		return c
	}
	for i, st := range s.Steps {
		g, m := copyExchange(gardener.Steps[i]), copyExchange(machinist.Steps[i])
		for _, d := range Differences {
			if d.Apply(st, &g, &m) {
				c.Used[d.ID]++
			}
		}
		gr, mr := g.Result, m.Result
		gr.Message, mr.Message = "", ""
		if !reflect.DeepEqual(gr, mr) {
			miss(g.Step, "Gardener reported %s, machinist %s", show(g.Result), show(m.Result))
		}
		if !sameRequests(g.Requests, m.Requests) {
			miss(g.Step, "Gardener's requests %s, machinist's %s", show(g.Requests), show(m.Requests))
		}
	}
	if gardener.Left != machinist.Left {
		miss("end", "Gardener left %+v, machinist %+v", gardener.Left, machinist.Left)
	}
	return c
}

func copyExchange(e Exchange) Exchange {
	out := e
	out.Requests = make([]Request, len(e.Requests))
	for i, r := range e.Requests {
		r.Params = maps.Clone(r.Params)
		out.Requests[i] = r
	}
	return out
}
