// Package version holds the build identity of the shardctl binary. Release
// builds set the variables with -ldflags "-X"; a plain `go build` or
// `go run` falls back to what the Go toolchain recorded in the binary.
// It imports nothing of this module.
package version

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// Set at link time by goreleaser and the Makefile:
//
//	-X github.com/shardctl/shardctl/internal/version.version=v1.2.3
var (
	version = ""
	commit  = ""
	date    = ""
)

// Info is the build identity. Its JSON field names are part of the CLI
// contract (`shardctl version -o json`).
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Date      string `json:"date"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns the identity of the running binary.
func Get() Info {
	return resolve(version, commit, date, readBuildInfo())
}

func readBuildInfo() *debug.BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	return bi
}

// resolve prefers link-time values and fills the gaps from the build info,
// so `go install ...@v1.2.3` reports v1.2.3 and a work-tree build reports
// "dev" with the VCS revision when the toolchain stamped one.
func resolve(v, c, d string, bi *debug.BuildInfo) Info {
	info := Info{
		Version:   v,
		Commit:    c,
		Date:      d,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
	if bi != nil {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if info.Commit == "" {
					info.Commit = s.Value
				}
			case "vcs.time":
				if info.Date == "" {
					info.Date = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && info.Commit != "" && c == "" && !strings.HasSuffix(info.Commit, "-dirty") {
			info.Commit += "-dirty"
		}
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	if info.Date == "" {
		info.Date = "unknown"
	}
	return info
}
