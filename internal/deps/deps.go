//go:build machinist_pin_deps

// Package deps pins the third-party modules the tree is built on while the packages that use
// them are being written, so parallel work does not race on go.mod. Delete once every module
// listed here is imported by real code.
package deps

import (
	_ "github.com/Azure/azure-sdk-for-go/sdk/azcore"
	_ "github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	_ "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	_ "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/go-logr/logr"
	_ "github.com/gophercloud/gophercloud/v2"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/urfave/cli/v2"
	_ "google.golang.org/grpc"
	_ "google.golang.org/protobuf/proto"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apimachinery/pkg/runtime"
	_ "k8s.io/client-go/kubernetes"
	_ "sigs.k8s.io/controller-runtime"
	_ "sigs.k8s.io/controller-runtime/pkg/envtest"
	_ "sigs.k8s.io/yaml"
)
