package oracle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/machinist-io/machinist/providers/kit/oraclekit"
)

// StepTimeout bounds one call; Gardener's driver polls an operation every 5 seconds.
const StepTimeout = 2 * time.Minute

// Run runs a scenario through the target newTarget makes against a fresh World, and returns the
// transcript: each step's answer and the Compute requests it made, and what was left.
func Run(ctx context.Context, s Scenario, driverName string, newTarget func(*World) (oraclekit.Target, error)) (tr Transcript, err error) {
	w, err := NewWorld()
	if err != nil {
		return Transcript{}, err
	}
	defer func() { err = errors.Join(err, w.Close()) }()
	t, err := newTarget(w)
	if err != nil {
		return Transcript{}, err
	}
	defer func() { err = errors.Join(err, t.Close()) }()
	tr = Transcript{Scenario: s.Name, Driver: driverName, Steps: []Exchange{}}
	created := map[string]string{}
	for i, st := range s.Steps {
		if st.Before != nil {
			st.Before(w.Cloud)
		}
		if _, err := w.take(); err != nil { // what Before did is not the driver's
			return tr, err
		}
		c, err := s.call(st, w, created)
		if err != nil {
			return tr, err
		}
		cctx, cancel := context.WithTimeout(ctx, StepTimeout)
		r, err := t.Call(cctx, c)
		cancel()
		if err != nil {
			return tr, fmt.Errorf("%s step %s: %w", s.Name, st.label(i), err)
		}
		w.Cloud.Faults.Clear()
		if st.Op == oraclekit.Create && r.Code == "OK" {
			created[st.Machine] = r.ProviderID
		}
		reqs, err := w.take()
		if err != nil {
			return tr, err
		}
		tr.Steps = append(tr.Steps, Exchange{Step: st.label(i), Result: r, Requests: reqs})
	}
	tr.Left = w.left()
	if v := w.Cloud.ContractViolations(); len(v) > 0 {
		return tr, fmt.Errorf("%s: fakegcp broke the Compute contract: %v", s.Name, v)
	}
	return tr, nil
}
