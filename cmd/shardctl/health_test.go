package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/sim/simtest"
	"github.com/shardctl/shardctl/probes/proxies"
)

// A proxy that follows a registry registers itself there; a shard killed
// with SIGKILL is DOWN in the proxy within two health intervals, and
// `shards list -o wide` shows it DOWN while the registry still says UP.
func TestShardsListShowsWhatTheProxiesSee(t *testing.T) {
	t.Parallel()
	f := newFederation(t)
	f.startSim(t, "blue-1", "blue")
	f.startSim(t, "blue-2", "blue")
	f.startProxy(t, "--health-interval", "200ms", "--health-timeout", "100ms", "--proxy-id", "proxy-a")
	var list struct {
		Shards []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"shards"`
		Proxies []proxies.View `json:"proxies"`
	}
	read := func() {
		r := runBin(t, bin, f.env, "", "shards", "list", "-o", "json")
		if r.code != 0 {
			t.Fatalf("shards list: exit %d: %s", r.code, r.stderr)
		}
		list.Proxies = nil
		if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
			t.Fatal(err)
		}
	}
	budget.Eventually(t, 20*time.Second, "the proxy registered, seeing both shards", func() bool {
		read()
		return len(list.Proxies) == 1 && len(list.Proxies[0].Shards) == 2
	})
	if v := list.Proxies[0]; v.Proxy != "proxy-a" || !strings.HasPrefix(v.Admin, "http://127.0.0.1:") {
		t.Errorf("proxy view %+v", v)
	}

	f.sims["blue-2"].Kill()
	killed := time.Now()
	budget.Eventually(t, 10*time.Second, "blue-2 DOWN in the proxy", func() bool {
		for _, s := range f.view(t).Shards {
			if s.ID == "blue-2" {
				return s.State == "DOWN"
			}
		}
		return false
	})
	t.Logf("blue-2 DOWN in the proxy %v after SIGKILL", time.Since(killed).Round(time.Millisecond))
	r := runBin(t, bin, f.env, "", "shards", "list", "-o", "wide")
	if r.code != 0 {
		t.Fatalf("shards list -o wide: exit %d: %s", r.code, r.stderr)
	}
	for _, line := range strings.Split(r.stdout, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		switch fields[0] {
		case "ID":
			if fields[len(fields)-1] != "PROXIES" {
				t.Errorf("header %q: want PROXIES last", line)
			}
		case "blue-1":
			if !strings.HasSuffix(line, "UP 1/1") {
				t.Errorf("blue-1: %q, want UP 1/1", line)
			}
		case "blue-2":
			// DOWN wherever shown: the registry's UP is in STATUS.
			if !strings.Contains(line, " DOWN ") || !strings.Contains(line, " UP ") || !strings.HasSuffix(line, "DOWN 1/1") {
				t.Errorf("blue-2: %q, want it DOWN, UP as the registry's status, DOWN 1/1 in the proxies", line)
			}
		}
	}
}

// A shard killed with SIGKILL is never shown healthy: DOWN in the proxy's
// /shards, in shards list, in probe health (exit 3) and on top's screen
// (its metrics stale, its numbers gone) — and still all of that after the
// registry's lease expired and evicted it, for the proxy still routes its
// keys to it. The shards play the oldest and the newest Zeebe: top reads
// both healthy before the kill, whatever their metric names.
func TestADeadShardIsNeverShownHealthy(t *testing.T) {
	t.Parallel()
	f := newFederation(t, "--self-preservation=false")
	for i, id := range []string{"blue-1", "blue-2"} {
		f.startSim(t, id, "blue", "--renewal-interval", "1s", "--lease-duration", "3s", "--zeebe-version", simtest.Ends()[i].String())
	}
	f.startProxy(t, "--health-interval", "200ms", "--health-timeout", "100ms", "--proxy-id", "proxy-a")
	top := proctest.StartTerminal(t, bin, f.env, 160, 20, "top", "--refresh", "500ms")
	// A shard's row: the last line that starts with its id (top says
	// why a shard is DOWN above its table, in a line of its own).
	row := func(screen, id string) string {
		found := ""
		for _, line := range strings.Split(screen, "\n") {
			if strings.HasPrefix(line, id+" ") {
				found = line
			}
		}
		return found
	}
	// The pools line names blue-2 before its first scrape draws its row.
	top.WaitFor(t, 30*time.Second, "blue-1", "blue-2")
	var screen string
	budget.Eventually(t, 30*time.Second, "blue-2's row on top's screen", func() bool {
		screen = top.Screen()
		return row(screen, "blue-2") != ""
	})
	budget.Eventually(t, 30*time.Second, "blue-1's row on top's screen", func() bool {
		screen = top.Screen()
		return row(screen, "blue-1") != ""
	})
	for _, id := range []string{"blue-1", "blue-2"} {
		if r := row(screen, id); !strings.Contains(r, "UP") || !strings.Contains(r, "✔ ok") {
			t.Fatalf("%s before the kill: %q\n%s", id, r, screen)
		}
	}

	f.sims["blue-2"].Kill()
	budget.Eventually(t, 10*time.Second, "blue-2 DOWN in the proxy", func() bool { return f.proxyState(t, "blue-2") == "DOWN" })
	check := func(when string, registered bool) {
		t.Helper()
		list := runBin(t, bin, f.env, "", "shards", "list")
		if r := row(list.stdout, "blue-2"); list.code != 0 || !strings.Contains(r, " DOWN ") || registered == strings.Contains(r, "not registered") {
			t.Errorf("%s: shards list: exit %d, blue-2 %q: want it DOWN (registered %v)\n%s", when, list.code, r, registered, list.stdout+list.stderr)
		}
		health := runBin(t, bin, f.env, "", "probe", "health")
		if r := row(health.stdout, "blue-2"); health.code != 3 || !strings.Contains(r, "DOWN in 1 of 1 proxies") || !strings.Contains(health.stderr, "blue-2") {
			t.Errorf("%s: probe health: exit %d, blue-2 %q: want 3 naming it\n%s", when, health.code, r, health.stdout+health.stderr)
		}
		if !registered && !strings.Contains(row(health.stdout, "blue-2"), "not in the registry") {
			t.Errorf("%s: probe health does not say blue-2 left the registry:\n%s", when, health.stdout)
		}
		screen := top.WaitFor(t, 30*time.Second, "? stale")
		if r := row(screen, "blue-2"); !strings.Contains(r, "DOWN") || !strings.Contains(r, "? stale") || strings.Contains(r, "✔") {
			t.Errorf("%s: top shows blue-2 as %q\n%s", when, r, screen)
		}
		sig := runBin(t, bin, f.env, "", "signals", "--sample", "3s", "-o", "json")
		if sig.code != 3 || !strings.Contains(sig.stdout, `"unknown": [`) || !strings.Contains(sig.stderr, "blue-2") {
			t.Errorf("%s: signals: exit %d, want 3 naming blue-2 as unknown\n%s%s", when, sig.code, sig.stdout, sig.stderr)
		}
	}
	check("after the kill", true)

	budget.Eventually(t, 20*time.Second, "the registry to evict blue-2", func() bool {
		var list struct{ Shards []struct{ ID string } }
		getRegistryJSON(t, f.regURL, "/shardctl/v1/shards", &list)
		return len(list.Shards) == 1
	})
	if st := f.proxyState(t, "blue-2"); st != "DOWN" {
		t.Fatalf("after the eviction the proxy holds blue-2 %q, want DOWN", st)
	}
	check("after the eviction", false)
}

// proxyState is the state a shard has in the proxy's /shards ("" when
// the proxy does not know it).
func (f *federation) proxyState(t *testing.T, id string) string {
	for _, s := range f.view(t).Shards {
		if s.ID == id {
			return s.State
		}
	}
	return ""
}
