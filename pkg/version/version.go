// Package version is what a fleetlet binary says it is: the version and
// commit the Makefile stamps at link time (hack/version.sh gives both):
//
//	go build -ldflags "-X github.com/fleetlet/fleetlet/pkg/version.version=0.1.0 \
//	  -X github.com/fleetlet/fleetlet/pkg/version.commit=$(git rev-parse HEAD)"
//
// A binary built without them (`go build`, `go test`, `go install`) reports
// version Unversioned and the commit Go's own build information recorded,
// if any. It is a leaf: every command, the image builder and the chart
// packaging read it.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Unversioned is the version of a binary built without the Makefile's stamp.
const Unversioned = "0.0.0-unversioned"

// Set by the linker (-X); never assigned in code.
var (
	version string
	commit  string
)

// Info is one binary's build: what `--version` prints and fleetlet_build_info
// carries.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns this binary's build.
func Get() Info {
	info := Info{
		Version:   version,
		Commit:    commit,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
	if info.Version == "" {
		info.Version = Unversioned
	}
	if info.Commit == "" {
		info.Commit = vcsRevision()
	}
	return info
}

// KeysAndValues is the build as structured-log pairs, for the line every
// long-running command logs when it starts.
func (i Info) KeysAndValues() []any {
	return []any{"version", i.Version, "commit", i.Commit, "go", i.GoVersion, "platform", i.Platform}
}

// String is the one line `--version` prints:
// "0.1.0 (commit 4f1c…, go1.26.8, linux/amd64)".
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, %s, %s)", i.Version, i.Commit, i.GoVersion, i.Platform)
}

// vcsRevision is the commit `go build` recorded from a git checkout, with
// "-dirty" when the tree had changes, or "unknown".
func vcsRevision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}
