// Package npmtest installs npm packages that tests run under node (the
// Eureka JavaScript client, Camunda's REST SDK), once per machine, into
// the user's cache outside the repository. It is tests' only: no runtime
// or tool imports it.
package npmtest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
)

// Modules returns the node_modules directory holding pkg at version,
// installing it on first use. A test that needs node or npm and finds
// neither fails, naming the Debian packages to install.
func Modules(t *testing.T, pkg, version string) string {
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
	dir := filepath.Join(cache, "shardctl", "npm", filepath.Base(pkg)+"-"+version)
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
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := budget.Context(t, 3*time.Minute)
	cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--prefix", dir, pkg+"@"+version)
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
