// Package version holds the version stamped into binaries by the Makefile.
package version

import "runtime/debug"

// Version is set with -ldflags "-X github.com/machinist-io/machinist/internal/version.Version=...".
var Version = ""

// String returns Version, or the module version recorded by the Go toolchain, or "dev".
func String() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
