// Package oracle runs machinist's AWS driver and Gardener's (the oracle: Gardener's
// machine-controller-manager-provider-aws, proven against the real EC2 for years) through the
// same scenarios against fakeaws, records what reaches the fake request by request, and compares
// the two: the API actions, their parameters (tags, block devices, interfaces, idempotency
// tokens, ...), their order, and what each driver reports (provider ID, node, list, error code).
//
// Gardener's driver cannot be built from the module proxy and the repository carries no build of
// it: `make test-gardener-oracle` takes it as an executable serving the oracle's protocol
// (ORACLE_AWS_DRIVER; docs/compatibility/aws.md), runs both, checks Gardener's side
// against the recorded corpus in testdata/gardener and writes it anew with -update. The replay
// test in this package runs machinist's side over the same scenarios in every `make test` and
// compares it with that corpus, so the fake and the provider stay honest without the network.
// Every remaining difference is a Difference (differences.go) with its reason and Gardener's
// source file; docs/compatibility/aws.md lists them.
package oracle

import (
	"context"

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

// Result is what a driver reported for a call: Code is the machine code's name, "OK" for success.
type Result struct {
	ProviderID  string            `json:"providerID,omitempty"`
	NodeName    string            `json:"nodeName,omitempty"`
	MachineList map[string]string `json:"machineList,omitempty"`
	Code        string            `json:"code"`
	Message     string            `json:"message,omitempty"`
}

// Target is a driver under test.
type Target interface {
	// Call makes one driver call; an error means the target itself failed (not the driver's
	// answer, which is in Result).
	Call(ctx context.Context, c Call) (Result, error)
	// Close ends the target.
	Close() error
}

// Request is one request that reached the fake, normalized (Normalize).
type Request struct {
	Action string            `json:"action"`
	Code   string            `json:"code,omitempty"`
	Params map[string]string `json:"params,omitempty"`
}

// Exchange is one step of a scenario: the call, what the driver reported and the requests the
// fake received meanwhile.
type Exchange struct {
	Step     string    `json:"step"`
	Result   Result    `json:"result"`
	Requests []Request `json:"requests"`
}

// Transcript is a scenario run through one driver.
type Transcript struct {
	Scenario string     `json:"scenario"`
	Driver   string     `json:"driver"`
	Steps    []Exchange `json:"steps"`
	// Left is what the fake held after the last step.
	Left Left `json:"left"`
}

// Left counts what a scenario left in the fake: live instances, volumes (those kept on
// termination) and network interfaces.
type Left struct {
	Instances         int `json:"instances"`
	Volumes           int `json:"volumes"`
	NetworkInterfaces int `json:"networkInterfaces"`
}
