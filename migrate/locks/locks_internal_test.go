package locks

import (
	"strings"
	"testing"
)

// No test can make autovacuum take a lock on cue, so its marks are
// checked on the rows pg_stat_activity gives it.
func TestClassifyAutovacuum(t *testing.T) {
	c := &Check{Mode: AccessExclusive}
	for _, tc := range []struct {
		name        string
		backendType string
		query       string
		autovacuum  bool
	}{
		{"worker", "autovacuum worker", "autovacuum: VACUUM public.orders (to prevent wraparound)", true},
		{"worker, query hidden", "autovacuum worker", "<insufficient privilege>", true},
		{"older server without backend_type", "", "autovacuum: VACUUM ANALYZE public.orders", true},
		{"a manual VACUUM", "client backend", "VACUUM orders", false},
	} {
		s := c.classify(Session{BackendType: tc.backendType, Query: tc.query, Mode: "ShareUpdateExclusiveLock", Granted: true}, nil)
		if s.Autovacuum != tc.autovacuum || !s.Conflicts || s.Mode != "SHARE UPDATE EXCLUSIVE" {
			t.Errorf("%s: %+v", tc.name, s)
		}
	}
	// A predicate lock is listed as PostgreSQL names it, and blocks no one.
	if s := c.classify(Session{Mode: "SIReadLock"}, nil); s.Conflicts || s.Mode != "SIReadLock" {
		t.Errorf("SIReadLock: %+v", s)
	}
}

func TestQueryCuts(t *testing.T) {
	long := "SELECT " + strings.Repeat("x, ", 600) + "\n\tFROM orders"
	s := (&Check{Mode: AccessShare}).classify(Session{Query: long}, nil)
	if n := len([]rune(s.Query)); n != queryJSONLen || !strings.HasSuffix(s.Query, "…") {
		t.Errorf("JSON query: %d characters", n)
	}
	short := s.ShortQuery()
	if n := len([]rune(short)); n != queryTableLen || strings.ContainsAny(short, "\n\t") {
		t.Errorf("table query: %d characters %q", n, short)
	}
}
