// Package e2e runs the flows a user and Cluster Autoscaler see, end to end, on the full local
// control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager): the `machinist
// run` and `machinist autoscaler` binaries as separate processes, the local provider's nodes and
// pods, and the project's externalgrpc client (grpcbridge/autoscaler/clusterautoscaler) driving
// the autoscaler server with Cluster Autoscaler's loop (see autoscaler_test.go). The package has
// only tests; `go test ./test/e2e/` runs them (skipped with -short). test/run holds the
// end-to-end tests of `machinist run` and `machinist dev` on their own.
package e2e
