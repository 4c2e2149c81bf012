//go:build tools

// Package tools pins the binaries the build and tests need: a real kube-apiserver and etcd for
// harness/testenv, controller-gen for deepcopy and CRDs, and the protoc plugins for grpcbridge.
// They live in their own module so their dependency graph never leaks into machinist's.
package tools

import (
	_ "github.com/machinist-io/machinist/build/tools/cmd/etcd"
	_ "google.golang.org/grpc/cmd/protoc-gen-go-grpc"
	_ "google.golang.org/protobuf/cmd/protoc-gen-go"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
