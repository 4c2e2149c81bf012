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

import "github.com/machinist-io/machinist/providers/kit/oraclekit"

// Request is one request that reached the fake, normalized (Normalize).
type Request struct {
	Action string            `json:"action"`
	Code   string            `json:"code,omitempty"`
	Params map[string]string `json:"params,omitempty"`
}

// Exchange is a step of a scenario with the EC2 requests the fake received meanwhile, and
// Transcript a scenario run through one driver (oraclekit).
type (
	Exchange   = oraclekit.Exchange[Request]
	Transcript = oraclekit.Transcript[Request, Left]
)

// Left counts what a scenario left in the fake: live instances, volumes (those kept on
// termination) and network interfaces.
type Left struct {
	Instances         int `json:"instances"`
	Volumes           int `json:"volumes"`
	NetworkInterfaces int `json:"networkInterfaces"`
}

// GardenerCommit is the commit of gardener/machine-controller-manager-provider-aws the
// differences were read against (v0.29.0-dev, after v0.28.0).
const GardenerCommit = "9dd2b7a853f552e3399b865c8c49b9c75beb03f4"
