// Package version holds the build's version, set by the linker.
package version

import "runtime/debug"

// Version is set with -ldflags "-X github.com/hyperfleet/hyperfleet/internal/version.Version=…".
var Version = ""

// String returns the version, falling back to the module version or "dev".
func String() string {
	if Version != "" {
		return Version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}
