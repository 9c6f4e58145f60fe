// Package buildinfo reads what the Go toolchain recorded about the running binary: the
// watukuy module's version and, for a build from a checkout, the VCS revision, its time and
// whether the tree was modified. The version command, the startup log lines and the
// watukuy_build_info metric all print it.
package buildinfo

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// Module is watukuy's module path.
const Module = "github.com/watukuy/watukuy"

// Info is what the build recorded; fields the build left out are empty.
type Info struct {
	// Version is the watukuy module's version: a tag or pseudo-version, "(devel)" for a build
	// of the checkout itself without a tag.
	Version string `json:"version"`
	// Revision, Time and Modified describe the checkout (vcs.revision, vcs.time, vcs.modified).
	Revision  string `json:"revision,omitempty"`
	Time      string `json:"time,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"goVersion"`
}

// Read returns the running binary's build information: the main module's when the binary is
// watukuy's own, the watukuy dependency's when a program embeds it.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "unknown"}
	}
	return FromBuildInfo(bi)
}

// FromBuildInfo extracts Info from bi (Read's logic, for tests).
func FromBuildInfo(bi *debug.BuildInfo) Info {
	in := Info{Version: "unknown", GoVersion: bi.GoVersion}
	if bi.Main.Path == Module {
		in.Version = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Revision = s.Value
			case "vcs.time":
				in.Time = s.Value
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
	} else {
		for _, d := range bi.Deps {
			if d.Path == Module {
				in.Version = d.Version
				if d.Replace != nil && d.Replace.Version != "" {
					in.Version = d.Replace.Version
				}
			}
		}
	}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	return in
}

// String is the one-line form: "v1.2.3 (rev 0123abcd, 2026-12-01T10:00:00Z, modified, go1.26.8)".
func (in Info) String() string {
	var parts []string
	if in.Revision != "" {
		rev := in.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		parts = append(parts, "rev "+rev)
	}
	if in.Time != "" {
		parts = append(parts, in.Time)
	}
	if in.Modified {
		parts = append(parts, "modified")
	}
	if in.GoVersion != "" {
		parts = append(parts, in.GoVersion)
	}
	if len(parts) == 0 {
		return in.Version
	}
	return fmt.Sprintf("%s (%s)", in.Version, strings.Join(parts, ", "))
}
