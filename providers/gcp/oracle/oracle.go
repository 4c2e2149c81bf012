// Package oracle runs machinist's GCP driver and Gardener's (the oracle:
// gardener/machine-controller-manager-provider-gcp, which has run against the real Compute
// Engine for years) through the same scenarios against fakegcp, records what reaches the fake
// request by request, and compares the two: the Compute API methods, their paths, queries and
// bodies (the instance an insert sends), their order, and what each driver answers (provider ID,
// node name, listed machines, machine code).
//
// Gardener's driver is not a dependency of machinist and the repository carries no recipe that
// builds it: test/oracle/run.sh (`make test-gardener-oracle`) takes it as an executable
// serving the JSON-lines protocol of Call and Result (docs/compatibility/gcp.md, "The oracle's
// driver process"), runs both, checks Gardener's side against the recorded corpus in
// testdata/gardener, and writes the corpus anew with -update. Gardener's Compute client has no
// endpoint option; it reaches the fake through Google's own host name, which a loopback HTTPS
// proxy (front.go) answers for the fake.
//
// The replay tests of this package run in every `make test`: machinist's side over the same
// scenarios against the fake, compared with the corpus, and the corpus's requests sent to the
// fake again, which must answer each as it answered Gardener. Every remaining difference is a
// Difference (differences.go) with its reason and Gardener's source; docs/compatibility/gcp.md
// lists them.
package oracle

import "github.com/machinist-io/machinist/providers/kit/oraclekit"

// Request is one Compute API request that reached the fake, normalized (normalize): the
// operation's name in a path is OPERATION, a requestId's value is dropped, and a body is the
// instance as Compute Engine reads it (fields with the Go client's zero values left out).
type Request struct {
	Method string         `json:"method"`
	Op     string         `json:"op"`
	Path   string         `json:"path"`
	Query  string         `json:"query,omitempty"`
	Body   map[string]any `json:"body,omitempty"`
	Status int            `json:"status"`
}

// Exchange is a step of a scenario with the Compute requests the fake received meanwhile, and
// Transcript a scenario run through one driver (oraclekit).
type (
	Exchange   = oraclekit.Exchange[Request]
	Transcript = oraclekit.Transcript[Request, Left]
)

// Left is what a scenario left in the fake: instances (by name and status) and disks.
type Left struct {
	Instances []string `json:"instances"`
	Disks     []string `json:"disks"`
}

// GardenerCommit is the commit of gardener/machine-controller-manager-provider-gcp the
// differences were read against and the corpus recorded with.
const GardenerCommit = "f192d12161a1e7c8c147ae471758b97358c381c1"
