//go:build tools

// Package buf pins buf, the protobuf compiler `make generate` runs (pure Go, so no system protoc
// is needed). It has its own module so its dependencies never mix with kube-apiserver's.
package buf

import _ "github.com/bufbuild/buf/cmd/buf"
