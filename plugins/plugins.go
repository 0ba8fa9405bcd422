// Package plugins finds and runs shardctl plugins: executables named
// shardctl-NAME on PATH, dispatched as `shardctl NAME ...` with kubectl's
// rules (longest match first, dashes in a command word become underscores
// in the file name, built-in commands always win).
// It imports nothing of this module.
package plugins

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// Prefix starts every plugin's file name.
const Prefix = "shardctl-"

// Finder looks plugins up on a PATH.
type Finder struct {
	// Path is the PATH list to search, in order.
	Path string
	// PathExt lists executable suffixes on Windows (PATHEXT); ignored elsewhere.
	PathExt string
}

// FromEnv returns a Finder for the process's PATH.
func FromEnv() Finder {
	return Finder{Path: os.Getenv("PATH"), PathExt: os.Getenv("PATHEXT")}
}

// Lookup finds the executable shardctl-NAME, where name is already joined
// with dashes ("a-b" for `shardctl a b`). The first executable on PATH wins.
func (f Finder) Lookup(name string) (string, bool) {
	path, err := f.LookPath(Prefix + name)
	return path, err == nil
}

func (f Finder) candidates(base string) []string {
	if runtime.GOOS != "windows" {
		return []string{base}
	}
	exts := strings.Split(strings.ToLower(f.PathExt), ";")
	if f.PathExt == "" {
		exts = []string{".com", ".exe", ".bat", ".cmd"}
	}
	out := make([]string, 0, len(exts))
	for _, e := range exts {
		if e != "" {
			out = append(out, base+e)
		}
	}
	return out
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	if err != nil || st.IsDir() {
		return false
	}
	if runtime.GOOS == "windows" {
		return true
	}
	return st.Mode().Perm()&0o111 != 0
}

// Match is the plugin that a command line selects.
type Match struct {
	// Path of the executable.
	Path string
	// Args are the arguments after the words that named the plugin.
	Args []string
}

// ErrFlagBeforeName is returned when a command line starts with a flag, so
// no plugin name can be read from it.
var ErrFlagBeforeName = errors.New("flags cannot be placed before a plugin name")

// Find applies kubectl's longest-match rule: for `shardctl a b-c --x y`
// it tries shardctl-a-b_c, then shardctl-a. Only the leading words that are
// not flags take part. It returns false when no plugin matches.
func (f Finder) Find(args []string) (Match, bool, error) {
	var words []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			break
		}
		words = append(words, strings.ReplaceAll(a, "-", "_"))
	}
	if len(words) == 0 {
		if len(args) > 0 {
			return Match{}, false, fmt.Errorf("%w: %s", ErrFlagBeforeName, args[0])
		}
		return Match{}, false, nil
	}
	for n := len(words); n > 0; n-- {
		if path, ok := f.Lookup(strings.Join(words[:n], "-")); ok {
			return Match{Path: path, Args: args[n:]}, true, nil
		}
	}
	return Match{}, false, nil
}

// Plugin is one plugin file found on PATH, as `shardctl plugin list` shows
// it. Field names are part of the -o json contract.
type Plugin struct {
	// Name is the file name without directory or Windows extension.
	Name string `json:"name"`
	// Command is how it is run: the words after shardctl.
	Command string `json:"command"`
	// Path is the full path of the file.
	Path       string   `json:"path"`
	Executable bool     `json:"executable"`
	Warnings   []string `json:"warnings"`
}

// IsBuiltin reports whether a command path (e.g. ["plugin","list"]) names a
// built-in command, which a plugin can never replace.
type IsBuiltin func(words []string) bool

// List returns every plugin file on PATH in PATH order, with kubectl's
// warnings: not executable, overshadowed by an earlier file of the same
// name, or unreachable because a built-in command has its name.
func (f Finder) List(builtin IsBuiltin) ([]Plugin, error) {
	var out []Plugin
	seen := map[string]string{} // name -> first path
	dirs := map[string]bool{}
	for _, dir := range filepath.SplitList(f.Path) {
		if dir == "" || dirs[dir] {
			continue
		}
		dirs[dir] = true
		entries, err := os.ReadDir(dir)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
				continue
			}
			return nil, fmt.Errorf("read PATH directory %s: %w", dir, err)
		}
		for _, e := range entries {
			if e.IsDir() || !strings.HasPrefix(e.Name(), Prefix) {
				continue
			}
			path := filepath.Join(dir, e.Name())
			name := f.trimExt(e.Name())
			p := Plugin{Name: name, Command: commandOf(name), Path: path, Executable: isExecutable(path), Warnings: []string{}}
			if !p.Executable {
				p.Warnings = append(p.Warnings, fmt.Sprintf("%s is named like a plugin but is not executable", path))
			}
			if first, dup := seen[name]; dup {
				p.Warnings = append(p.Warnings, fmt.Sprintf("%s is overshadowed by a plugin of the same name earlier on PATH: %s", path, first))
			} else {
				seen[name] = path
			}
			if builtin != nil && builtin(strings.Fields(p.Command)) {
				p.Warnings = append(p.Warnings, fmt.Sprintf("%s can never run: the built-in command \"%s\" has its name", path, p.Command))
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// Names returns the first words of the runnable plugins on PATH, sorted,
// for completion of `shardctl <TAB>`.
func (f Finder) Names(builtin IsBuiltin) []string {
	list, err := f.List(builtin)
	if err != nil {
		return nil
	}
	set := map[string]bool{}
	for _, p := range list {
		if p.Executable && len(p.Warnings) == 0 {
			set[strings.Fields(p.Command)[0]] = true
		}
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (f Finder) trimExt(name string) string {
	if runtime.GOOS != "windows" {
		return name
	}
	ext := filepath.Ext(name)
	if ext != "" && strings.Contains(strings.ToLower(f.PathExt+";.exe;.bat;.cmd;.com"), strings.ToLower(ext)) {
		return strings.TrimSuffix(name, ext)
	}
	return name
}

// commandOf turns "shardctl-foo-bar_baz" into "foo bar-baz".
func commandOf(name string) string {
	words := strings.Split(strings.TrimPrefix(name, Prefix), "-")
	for i, w := range words {
		words[i] = strings.ReplaceAll(w, "_", "-")
	}
	return strings.Join(words, " ")
}

// LookPath finds an executable by its full file name on the Finder's PATH,
// as exec.LookPath does for the process PATH.
func (f Finder) LookPath(file string) (string, error) {
	for _, dir := range filepath.SplitList(f.Path) {
		if dir == "" {
			// An empty PATH entry means the working directory; like kubectl,
			// do not run plugins from wherever the user happens to stand.
			continue
		}
		for _, cand := range f.candidates(filepath.Join(dir, file)) {
			if isExecutable(cand) {
				return cand, nil
			}
		}
	}
	return "", fmt.Errorf("%s: not found on PATH", file)
}
