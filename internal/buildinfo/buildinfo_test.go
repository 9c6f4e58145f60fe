package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"a build of the checkout", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: Module, Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			"(devel) (rev 0123456789ab, 2026-12-01T10:00:00Z, modified, go1.26.8)"},
		{"go install of a tag", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: Module, Version: "v1.2.3"}},
			"v1.2.3 (go1.26.8)"},
		{"a program that embeds watukuy", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/app", Version: "v0.1.0"},
			Deps: []*debug.Module{{Path: "github.com/redis/go-redis/v9", Version: "v9.23.0"}, {Path: Module, Version: "v1.4.0"}}},
			"v1.4.0 (go1.26.8)"},
		{"a test binary (no main version)", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: Module}},
			"(devel) (go1.26.8)"},
	} {
		if got := FromBuildInfo(&tc.bi).String(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
