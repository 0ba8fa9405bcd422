package plugins

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// Names under which kubectl finds shardctl: kubectl runs `kubectl shard`
// as the executable kubectl-shard, and since kubectl 1.26 completes a
// plugin's arguments by running kubectl_complete-shard with them.
const (
	KubectlPluginName     = "kubectl-shard"
	KubectlCompleteName   = "kubectl_complete-shard"
	KubectlDisplayName    = "kubectl shard"
	StandaloneDisplayName = "shardctl"
)

// Invocation is how the binary was started, read from argv[0].
type Invocation int

const (
	Standalone Invocation = iota
	KubectlPlugin
	KubectlComplete
)

// InvokedAs classifies argv[0].
func InvokedAs(argv0 string) Invocation {
	base := strings.ToLower(filepath.Base(argv0))
	base = strings.TrimSuffix(base, ".exe")
	switch base {
	case KubectlPluginName:
		return KubectlPlugin
	case KubectlCompleteName:
		return KubectlComplete
	}
	return Standalone
}

// LinkResult says what InstallKubectl did for one name.
type LinkResult struct {
	Path   string `json:"path"`
	Target string `json:"target"`
	Action string `json:"action"` // created, replaced, unchanged, copied
}

// ErrExists is returned when a file that is not ours is in the way.
var ErrExists = errors.New("file exists")

// InstallKubectl makes kubectl find shardctl: it creates kubectl-shard and
// kubectl_complete-shard in dir, both pointing at self. Symlinks are used
// where the OS allows them, copies elsewhere. An existing link to self is
// left alone; anything else is replaced only with force.
func InstallKubectl(dir, self string, force bool) ([]LinkResult, error) {
	self, err := filepath.Abs(self)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	var out []LinkResult
	for _, name := range []string{KubectlPluginName, KubectlCompleteName} {
		if runtime.GOOS == "windows" {
			name += ".exe"
		}
		r, err := link(filepath.Join(dir, name), self, force)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

func link(path, target string, force bool) (LinkResult, error) {
	r := LinkResult{Path: path, Target: target, Action: "created"}
	if cur, err := os.Readlink(path); err == nil && cur == target {
		r.Action = "unchanged"
		return r, nil
	}
	if _, err := os.Lstat(path); err == nil {
		if !force {
			return r, fmt.Errorf("%s: %w; pass --force to replace it", path, ErrExists)
		}
		if err := os.Remove(path); err != nil {
			return r, fmt.Errorf("replace %s: %w", path, err)
		}
		r.Action = "replaced"
	} else if !errors.Is(err, fs.ErrNotExist) {
		return r, err
	}
	if err := os.Symlink(target, path); err == nil {
		return r, nil
	} else if runtime.GOOS != "windows" {
		return r, fmt.Errorf("link %s: %w", path, err)
	}
	r.Action = "copied"
	return r, copyFile(target, path)
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// OnPath reports whether dir is one of the PATH entries.
func OnPath(dir, path string) bool {
	abs, _ := filepath.Abs(dir)
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			continue
		}
		if a, _ := filepath.Abs(d); a == abs {
			return true
		}
	}
	return false
}
