package ledger

import (
	"context"
	"maps"
	"testing"
)

func order(keys map[string]int64) Deployment {
	return Deployment{
		Resources: []Resource{{Name: "order.bpmn", Content: []byte("<definitions/>")}},
		Processes: []ProcessID{
			{BpmnProcessID: "order", Version: 1, Keys: keys},
			{BpmnProcessID: "order", Version: 2, Keys: map[string]int64{"a": 20}},
		},
	}
}

func TestMemoryLedger(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		run  func(t *testing.T, l *MemoryLedger)
	}{
		{"append numbers from 1", func(t *testing.T, l *MemoryLedger) {
			for want := 1; want <= 3; want++ {
				d, err := l.Append(ctx, Deployment{Seq: 99})
				if err != nil || d.Seq != want {
					t.Fatalf("Append = seq %d, %v; want seq %d", d.Seq, err, want)
				}
			}
			all, _ := l.All(ctx)
			for i, d := range all {
				if d.Seq != i+1 {
					t.Errorf("All()[%d].Seq = %d", i, d.Seq)
				}
			}
		}},
		{"all returns copies", func(t *testing.T, l *MemoryLedger) {
			appended := order(map[string]int64{"a": 10})
			if _, err := l.Append(ctx, appended); err != nil {
				t.Fatal(err)
			}
			appended.Processes[0].Keys["a"] = -1 // the caller's map must not be the ledger's
			got, _ := l.All(ctx)
			got[0].Processes[0].Keys["a"] = -2
			got[0].Processes[0].Keys["b"] = -3
			got[0].Processes[1].Version = 7
			again, _ := l.All(ctx)
			p := again[0].Processes
			if !maps.Equal(p[0].Keys, map[string]int64{"a": 10}) || p[1].Version != 2 {
				t.Errorf("ledger changed through a returned copy: %+v", p)
			}
		}},
		{"set keys only for the matching id@version", func(t *testing.T, l *MemoryLedger) {
			if _, err := l.Append(ctx, order(nil)); err != nil {
				t.Fatal(err)
			}
			keys := map[string]int64{ProcessRef("order", 1): 11, ProcessRef("order", 3): 33, ProcessRef("other", 2): 44}
			if err := l.SetKeys(ctx, 1, "b", keys); err != nil {
				t.Fatal(err)
			}
			p := mustAll(t, l)[0].Processes
			if !maps.Equal(p[0].Keys, map[string]int64{"b": 11}) {
				t.Errorf("order@1 keys = %v, want b:11", p[0].Keys)
			}
			if !maps.Equal(p[1].Keys, map[string]int64{"a": 20}) {
				t.Errorf("order@2 keys = %v, want a:20 only", p[1].Keys)
			}
		}},
		{"set keys on an unknown seq errors", func(t *testing.T, l *MemoryLedger) {
			if _, err := l.Append(ctx, order(nil)); err != nil {
				t.Fatal(err)
			}
			for _, seq := range []int{-1, 0, 2} {
				if err := l.SetKeys(ctx, seq, "a", map[string]int64{ProcessRef("order", 1): 1}); err == nil {
					t.Errorf("SetKeys(seq %d) = nil, want an error", seq)
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, &MemoryLedger{}) })
	}
}

func mustAll(t *testing.T, l Ledger) []Deployment {
	t.Helper()
	all, err := l.All(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return all
}
