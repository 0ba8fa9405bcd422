package version

import (
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	stamped := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc123"},
			{Key: "vcs.time", Value: "2026-11-30T08:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	tests := []struct {
		name          string
		v, c, d       string
		bi            *debug.BuildInfo
		wantVersion   string
		wantCommit    string
		wantDate      string
		wantGoVersion string
	}{
		{"ldflags win", "v1.2.3", "deadbeef", "2026-01-01", stamped, "v1.2.3", "deadbeef", "2026-01-01", "go1.26.8"},
		{"work tree build", "", "", "", stamped, "dev", "abc123-dirty", "2026-11-30T08:00:00Z", "go1.26.8"},
		{"go install at a tag", "", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.4.0"}}, "v0.4.0", "unknown", "unknown", ""},
		{"nothing known", "", "", "", nil, "dev", "unknown", "unknown", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := resolve(tt.v, tt.c, tt.d, tt.bi)
			if got.Version != tt.wantVersion || got.Commit != tt.wantCommit || got.Date != tt.wantDate {
				t.Errorf("resolve() = %+v, want version %q commit %q date %q", got, tt.wantVersion, tt.wantCommit, tt.wantDate)
			}
			if tt.wantGoVersion != "" && got.GoVersion != tt.wantGoVersion {
				t.Errorf("GoVersion = %q, want %q", got.GoVersion, tt.wantGoVersion)
			}
			if got.GoVersion == "" || got.Platform == "" {
				t.Errorf("GoVersion and Platform must never be empty: %+v", got)
			}
		})
	}
}
