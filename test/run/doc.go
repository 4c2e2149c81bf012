// Package run tests `machinist run` and `machinist dev` end to end: the built binary against a
// real etcd and kube-apiserver (the full control plane where a test needs it), with the local
// provider's machines as real Nodes. Samples reaching Running, scaling, rolling updates, leader
// election, providers dialling in (machinist's protocol and the 2018 one), driver processes,
// machine preservation, Gardener's manifests, and `make run` from start to clean-up. The package
// has only tests; `go test ./test/run/` runs them (skipped with -short).
package run
