//go:build tools

// Package golangcilint pins golangci-lint, the linter `make lint` runs with the linters chosen in
// .golangci.yml. It has its own module so its many dependencies never mix with kube-apiserver's
// (build/tools) or machinist's.
package golangcilint

import _ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
