// Package oraclekit is what the differential runs against Gardener's providers share
// (providers/aws/oracle, providers/gcp/oracle): the driver calls of a scenario and their answers,
// the transcripts of what reached the fake, the recorded corpus, Gardener's driver as a process
// speaking the oracle's JSON-lines protocol, machinist's driver as a target, and the documented
// differences. What reaches each cloud's fake, how it is normalized and compared, stays in the
// cloud's oracle.
package oraclekit

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// Op is a driver operation.
type Op string

// The operations a scenario calls.
const (
	Create     Op = "create"
	Initialize Op = "initialize"
	Status     Op = "status"
	List       Op = "list"
	Delete     Op = "delete"
)

// Call is one driver call as both drivers receive it; its JSON is what Gardener's driver
// process reads (the objects in their Kubernetes JSON, which Gardener's types share).
type Call struct {
	Op           Op                     `json:"op"`
	Machine      *v1alpha1.Machine      `json:"machine,omitempty"`
	MachineClass *v1alpha1.MachineClass `json:"machineClass,omitempty"`
	Secret       *corev1.Secret         `json:"secret,omitempty"`
}

// Result is what a driver answered: Code is the machine code's name, "OK" for success. The
// message is kept for the reader; the comparisons leave it out.
type Result struct {
	ProviderID  string            `json:"providerID,omitempty"`
	NodeName    string            `json:"nodeName,omitempty"`
	MachineList map[string]string `json:"machineList,omitempty"`
	Code        string            `json:"code"`
	Message     string            `json:"message,omitempty"`
}

// Target is a driver under test.
type Target interface {
	// Call makes one driver call; an error means the target itself failed, not the driver
	// (whose answer is the Result).
	Call(ctx context.Context, c Call) (Result, error)
	// Close ends the target.
	Close() error
}

// Exchange is one step of a scenario: what the driver answered and the requests of type R the
// fake received meanwhile.
type Exchange[R any] struct {
	Step     string `json:"step"`
	Result   Result `json:"result"`
	Requests []R    `json:"requests"`
}

// Transcript is a scenario run through one driver: its exchanges and what the fake held after
// the last step (Left, of type L).
type Transcript[R, L any] struct {
	Scenario string        `json:"scenario"`
	Driver   string        `json:"driver"`
	Steps    []Exchange[R] `json:"steps"`
	Left     L             `json:"left"`
}

// The two drivers' names in transcripts.
const (
	Gardener  = "gardener"
	Machinist = "machinist"
)

// Label names the i-th step of a scenario in a transcript: "3 create m-1: after a stockout".
func Label(i int, op Op, machine, note string) string {
	s := fmt.Sprintf("%d %s", i+1, op)
	if machine != "" {
		s += " " + machine
	}
	if note != "" {
		s += ": " + note
	}
	return s
}

// Difference is a documented way machinist's requests or answers differ from Gardener's, kept
// because machinist's behaviour is deliberately safer or more precise; the cloud's
// docs/compatibility page gives each one's reason. A comparison rewrites both exchanges of a step
// (of type S, exchanges of type E) to their common form with it.
type Difference[S, E any] struct {
	// ID names it in the cloud's docs/compatibility page.
	ID string
	// Gardener is the file (and function) of Gardener's provider that behaves otherwise.
	Gardener string
	// What says what differs.
	What string
	// Apply rewrites a step's two exchanges; it reports whether it changed anything.
	Apply func(st S, g, m *E) bool
}
