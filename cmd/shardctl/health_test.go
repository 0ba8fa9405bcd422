package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/probes/proxies"
)

// A proxy that follows a registry registers itself there; a shard killed
// with SIGKILL is DOWN in the proxy within two health intervals, and
// `shards list -o wide` shows it while the registry still says UP.
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
			if !strings.Contains(line, " UP ") || !strings.HasSuffix(line, "DOWN 1/1") {
				t.Errorf("blue-2: %q, want UP in the registry and DOWN 1/1 in the proxies", line)
			}
		}
	}
}
