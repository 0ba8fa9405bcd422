// Package npmtest installs npm packages that tests run under node (the
// Eureka JavaScript client, Camunda's REST SDK), once per machine, into
// the user's cache outside the repository. It is tests' only: no runtime
// or tool imports it.
package npmtest

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
)

// Modules returns the node_modules directory holding pkg at version,
// installing it on first use. A test that needs node or npm and finds
// neither fails, naming the Debian packages to install.
func Modules(t *testing.T, pkg, version string) string {
	t.Helper()
	dir := cacheDir(t, pkg, filepath.Base(pkg)+"-"+version)
	return install(t, dir, pkg, version, nil, []string{pkg + "@" + version})
}

// Project returns the node_modules directory of a package.json of the
// test's (dependencies pinned, and overrides where a dependency must be
// replaced) with files beside it (a local package it points to, say),
// installed on first use into a directory named after name and the
// files' contents. pkg at version is the package the test runs: its
// presence says the install is done.
func Project(t *testing.T, name, pkg, version string, files map[string][]byte) string {
	t.Helper()
	h := sha256.New()
	for _, f := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(files[f]))
		h.Write(files[f])
	}
	dir := cacheDir(t, pkg, fmt.Sprintf("%s-%x", name, h.Sum(nil)[:6]))
	write := func() error {
		_, err := WriteFiles(dir, files)
		return err
	}
	// --install-links copies a local package rather than link it, so
	// that its own dependencies are installed too.
	return install(t, dir, pkg, version, write, []string{"--install-links"})
}

// WriteFiles writes files (paths relative to dir, directories made as
// needed) and returns their paths.
func WriteFiles(dir string, files map[string][]byte) ([]string, error) {
	var paths []string
	for name, b := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return nil, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// cacheDir is the directory for an install in the user's cache, once
// node and npm are found.
func cacheDir(t *testing.T, pkg, name string) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (%v): this test runs %s under node; install the Debian packages nodejs and npm (apt-get install nodejs npm)", tool, err, pkg)
		}
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatalf("no XDG_CACHE_HOME and no home directory to cache %s in: %v", pkg, err)
		}
		cache = filepath.Join(home, ".cache")
	}
	dir := filepath.Join(cache, "shardctl", "npm", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// install runs npm install with args in dir unless pkg is there at
// version already, and returns dir's node_modules; prepare, when set,
// writes what the install needs first.
func install(t *testing.T, dir, pkg, version string, prepare func() error, args []string) string {
	t.Helper()
	modules := filepath.Join(dir, "node_modules")
	installed := func() error {
		b, err := os.ReadFile(filepath.Join(modules, pkg, "package.json"))
		if err != nil {
			return err
		}
		var p struct{ Version string }
		if err := json.Unmarshal(b, &p); err != nil {
			return err
		}
		if p.Version != version {
			return fmt.Errorf("version %s installed, want %s", p.Version, version)
		}
		return nil
	}
	if installed() == nil {
		return modules
	}
	// Tests of several packages run at once and may want the same
	// install: the first installs, the others wait for it and find it.
	lock, err := os.OpenFile(filepath.Join(dir, ".install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Close() }() // closing releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("lock %s: %v", lock.Name(), err)
	}
	if installed() == nil {
		return modules
	}
	if prepare != nil {
		if err := prepare(); err != nil {
			t.Fatalf("prepare the install of %s@%s in %s: %v", pkg, version, dir, err)
		}
	}
	ctx := budget.Context(t, 3*time.Minute)
	cmd := exec.CommandContext(ctx, "npm", append([]string{"install", "--no-audit", "--no-fund", "--prefix", dir}, args...)...)
	cmd.Env = Env()
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("npm install %s@%s into %s: %v\n%s", pkg, version, dir, err, out)
	}
	if err := installed(); err != nil {
		t.Fatalf("npm install %s@%s into %s: %v\n%s", pkg, version, dir, err, out)
	}
	t.Logf("installed %s@%s into %s in %v", pkg, version, dir, time.Since(start).Round(time.Millisecond))
	return modules
}

// systemCAs is Debian's bundle of the CAs the system trusts.
const systemCAs = "/etc/ssl/certs/ca-certificates.crt"

// Env is the environment npm and node run in. Node trusts only the CA
// list it was built with, not the system's that apt, curl and Go trust;
// behind a network whose TLS is signed by a CA only the system's bundle
// holds, npm fails with SELF_SIGNED_CERT_IN_CHAIN (npm's own cafile
// setting did not help on Node 20). So the system's bundle is added,
// unless the caller chose extra CAs of its own.
func Env() []string {
	env := os.Environ()
	if _, set := os.LookupEnv("NODE_EXTRA_CA_CERTS"); set {
		return env
	}
	if _, err := os.Stat(systemCAs); err != nil {
		return env
	}
	return append(env, "NODE_EXTRA_CA_CERTS="+systemCAs)
}
