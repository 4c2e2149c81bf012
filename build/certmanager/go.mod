// Pins cert-manager for kubernetes/deploy's tests, which install its CRDs (Certificate, Issuer)
// into the test API server to dry-run the autoscaler overlay: `go mod download -json
// github.com/cert-manager/cert-manager` in this directory names the module's directory, and its
// deploy/crds holds the CRDs. A module of its own, so that cert-manager's dependencies never
// enter machinist's go.mod.
module github.com/machinist-io/machinist/build/certmanager

go 1.26.0

require github.com/cert-manager/cert-manager v1.21.2
