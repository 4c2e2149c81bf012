// Package mcmcompat holds end-to-end tests of what a Gardener operator sees when machinist
// replaces machine-controller-manager, or hands back to it: MCM's rollout semantics (which
// template changes roll out and which apply in place), MachineSets as MCM writes them, Cluster
// Autoscaler marks either controller left, machines about to be deleted, unknown fields, and a
// quiet run on CRDs shaped like MCM's (harness/testenv/mcmcrds). Each test runs the controller
// manager of `machinist run` with the local provider, whose machines become real Nodes, on a
// real kube-apiserver. The package has no code of its own.
package mcmcompat
