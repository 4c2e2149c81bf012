// Package version holds the version stamped into binaries by the Makefile.
package version

import "runtime/debug"

// Version and Revision are set with -ldflags "-X github.com/machinist-io/machinist/internal/version.Version=...":
// the Makefile's VERSION (also the image tag) and the git commit the binary was built from.
var (
	Version  = ""
	Revision = ""
)

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

// RevisionString returns Revision, or the commit recorded by the Go toolchain (when it stamps
// VCS information), or "unknown".
func RevisionString() string {
	if Revision != "" {
		return Revision
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, modified := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if rev != "" {
			if modified {
				rev += "-dirty"
			}
			return rev
		}
	}
	return "unknown"
}
