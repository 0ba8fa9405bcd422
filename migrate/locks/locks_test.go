package locks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/pgtest"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/migrate/locks"
)

// PostgreSQL's documentation, table "Conflicting Lock Modes", as drawn
// there: X where the row's mode conflicts with the column's.
func TestLockModeConflicts(t *testing.T) {
	// columns: AS RS RE SUE S SRE E AE
	grid := map[locks.Mode]string{
		locks.AccessShare:          ".......X",
		locks.RowShare:             "......XX",
		locks.RowExclusive:         "....XXXX",
		locks.ShareUpdateExclusive: "...XXXXX",
		locks.Share:                "..XX.XXX",
		locks.ShareRowExclusive:    "..XXXXXX",
		locks.Exclusive:            ".XXXXXXX",
		locks.AccessExclusive:      "XXXXXXXX",
	}
	modes := locks.Modes()
	if len(modes) != 8 || len(grid) != 8 {
		t.Fatalf("%d modes, %d rows: want 8", len(modes), len(grid))
	}
	for _, held := range modes {
		for i, req := range modes {
			want := grid[held][i] == 'X'
			if got := held.ConflictsWith(req); got != want {
				t.Errorf("%s conflicts with %s: %v, want %v", held, req, got, want)
			}
			if held.ConflictsWith(req) != req.ConflictsWith(held) {
				t.Errorf("%s and %s: the relation is not symmetric", held, req)
			}
		}
	}
}

func TestParseLockMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want locks.Mode
	}{
		{"access-exclusive", locks.AccessExclusive},
		{"ACCESS EXCLUSIVE", locks.AccessExclusive},
		{"AccessExclusiveLock", locks.AccessExclusive},
		{"share", locks.Share},
		{"share-row-exclusive", locks.ShareRowExclusive},
		{"share_update_exclusive", locks.ShareUpdateExclusive},
		{"row-share", locks.RowShare},
	} {
		if got, err := locks.ParseMode(tc.in); err != nil || got != tc.want {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, m := range locks.Modes() {
		if got, err := locks.ParseMode(m.Flag()); err != nil || got != m {
			t.Errorf("%s does not read back from its flag %q: %v, %v", m, m.Flag(), got, err)
		}
	}
	_, err := locks.ParseMode("exclusiv")
	if err == nil || !strings.Contains(err.Error(), "access-share, row-share") {
		t.Errorf("an unknown mode: %v, want the list of modes", err)
	}
}

const (
	appPassword    = "app-pw-Zq7#s3cret"
	readerPassword = "reader-pw-9fK2"
)

// shop is a PostgreSQL server with a database shop owned by the role app,
// and a role reader that may only read its tables.
type shop struct {
	*pgtest.Server
	dsn string
}

// startShop starts a server of the test's own, the test going on beside
// the other tests that start one (they wait on initdb and on locks).
func startShop(t *testing.T, tables ...string) shop {
	t.Helper()
	t.Parallel()
	s := pgtest.Start(t)
	s.Exec(t, "postgres",
		"CREATE ROLE app LOGIN PASSWORD '"+appPassword+"'",
		"CREATE ROLE reader LOGIN PASSWORD '"+readerPassword+"'",
		"CREATE DATABASE shop OWNER app")
	var ddl []string
	for _, tb := range tables {
		ddl = append(ddl, fmt.Sprintf("CREATE TABLE %s (id bigint PRIMARY KEY, note text)", tb),
			fmt.Sprintf("ALTER TABLE %s OWNER TO app", tb),
			fmt.Sprintf("GRANT SELECT ON %s TO reader", tb))
	}
	s.Exec(t, "shop", ddl...)
	return shop{Server: s, dsn: s.DSN("app", appPassword, "shop")}
}

// session opens a connection as app that runs statements and keeps what
// they took until the test ends (its transaction rolled back then).
func (s shop) session(t *testing.T, statements ...string) int {
	t.Helper()
	return pgtest.Session(t, s.dsn, statements...)
}

// waiter opens a session that waits for a lock, as a migration queued
// behind a reader does, and returns its pid once PostgreSQL shows it
// waiting.
func (s shop) waiter(t *testing.T, lock string) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, err := pgx.Connect(budget.Context(t, 10*time.Second), s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = c.Exec(ctx, "BEGIN; "+lock)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		c.Close(context.Background())
	})
	pid := int(c.PgConn().PID())
	admin := s.Connect(t, "shop")
	budget.Eventually(t, 10*time.Second, fmt.Sprintf("pid %d to wait for its lock", pid), func() bool {
		var waiting bool
		err := admin.QueryRow(context.Background(), "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)", pid).Scan(&waiting)
		return err == nil && waiting
	})
	return pid
}

func (s shop) check(t *testing.T, mode locks.Mode, timeout time.Duration, tables ...string) (locks.Report, error) {
	t.Helper()
	return s.checkAs(t, s.dsn, mode, timeout, tables...)
}

func (s shop) checkAs(t *testing.T, dsn string, mode locks.Mode, timeout time.Duration, tables ...string) (locks.Report, error) {
	t.Helper()
	d, err := locks.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	c := &locks.Check{DSN: d, Tables: tables, Mode: mode, LockTimeout: timeout}
	return c.Run(budget.Context(t, 30*time.Second))
}

// assertNothingLeft fails the test if a session of the preflight is still
// in a transaction or waiting for a lock.
func (s shop) assertNothingLeft(t *testing.T) {
	t.Helper()
	admin := s.Connect(t, "shop")
	var left []string
	err := budget.Wait(budget.Of(5*time.Second), func() bool {
		rows, err := admin.Query(context.Background(), `SELECT pid || ' ' || coalesce(state, '') FROM pg_stat_activity
			WHERE application_name = $1 AND (state IN ('idle in transaction', 'idle in transaction (aborted)', 'active') OR xact_start IS NOT NULL)`,
			locks.ApplicationName)
		if err != nil {
			return false
		}
		left, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err == nil && len(left) == 0
	})
	if err != nil {
		t.Fatalf("sessions of %q still in a transaction: %q (%v)", locks.ApplicationName, left, err)
	}
}

func TestLockPreflight(t *testing.T) {
	s := startShop(t, "free1", "shared1", "locked1", "read1", "multi_a", "multi_b", "prep1", "queue1")
	const short = 300 * time.Millisecond

	for _, tc := range []struct {
		name   string
		tables []string
		mode   locks.Mode
		// setup makes the sessions that lock; it returns the pids the
		// preflight must name as blockers.
		setup      func(t *testing.T) []int
		acquired   bool
		wantListed int // sessions listed at least
	}{
		{
			name: "a free table", tables: []string{"free1"}, mode: locks.AccessExclusive,
			setup:    func(*testing.T) []int { return nil },
			acquired: true,
		},
		{
			name: "a lock that does not conflict", tables: []string{"shared1"}, mode: locks.ShareUpdateExclusive,
			setup:    func(t *testing.T) []int { s.session(t, "BEGIN", "SELECT * FROM shared1"); return nil },
			acquired: true, wantListed: 1,
		},
		{
			name: "a table locked by another session", tables: []string{"locked1"}, mode: locks.AccessShare,
			setup: func(t *testing.T) []int {
				return []int{s.session(t, "BEGIN", "LOCK TABLE locked1 IN ACCESS EXCLUSIVE MODE")}
			},
			wantListed: 1,
		},
		{
			name: "a long transaction that read the table", tables: []string{"public.read1"}, mode: locks.AccessExclusive,
			setup:      func(t *testing.T) []int { return []int{s.session(t, "BEGIN", "SELECT * FROM read1")} },
			wantListed: 1,
		},
		{
			name: "the second of two tables locked", tables: []string{"multi_a", "multi_b"}, mode: locks.AccessExclusive,
			setup:      func(t *testing.T) []int { return []int{s.session(t, "BEGIN", "INSERT INTO multi_b VALUES (1)")} },
			wantListed: 1,
		},
		{
			name: "a forgotten prepared transaction", tables: []string{"prep1"}, mode: locks.RowExclusive,
			setup: func(t *testing.T) []int {
				s.session(t, "BEGIN", "LOCK TABLE prep1 IN SHARE MODE", "PREPARE TRANSACTION 'forgotten'")
				t.Cleanup(func() { s.Exec(t, "shop", "ROLLBACK PREPARED 'forgotten'") })
				return []int{0}
			},
			wantListed: 1,
		},
		{
			// LOCK TABLE takes a partitioned table's partitions too: a
			// reader of one partition blocks it without touching the table.
			name: "a reader of one partition", tables: []string{"parted"}, mode: locks.AccessExclusive,
			setup: func(t *testing.T) []int {
				s.Exec(t, "shop", "CREATE TABLE parted (id bigint) PARTITION BY RANGE (id)",
					"CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (100)",
					"ALTER TABLE parted OWNER TO app", "ALTER TABLE parted_1 OWNER TO app")
				return []int{s.session(t, "BEGIN", "SELECT * FROM parted_1")}
			},
			wantListed: 1,
		},
		{
			// The field lesson: a lock request queued behind a reader makes
			// every later request queue behind it, even a read.
			name: "a migration queued ahead", tables: []string{"queue1"}, mode: locks.AccessShare,
			setup: func(t *testing.T) []int {
				s.session(t, "BEGIN", "SELECT * FROM queue1")
				return []int{s.waiter(t, "LOCK TABLE queue1 IN ACCESS EXCLUSIVE MODE")}
			},
			wantListed: 2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			blockers := tc.setup(t)
			start := time.Now()
			rep, err := s.check(t, tc.mode, short, tc.tables...)
			took := time.Since(start)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			t.Logf("%s (in %v)", rep.Verdict(), took.Round(time.Millisecond))
			if rep.Acquired != tc.acquired {
				t.Fatalf("acquired %v, want %v: %s", rep.Acquired, tc.acquired, rep.Reason)
			}
			if len(rep.Sessions) < tc.wantListed {
				t.Errorf("listed %d sessions, want %d at least: %+v", len(rep.Sessions), tc.wantListed, rep.Sessions)
			}
			if rep.Mode != tc.mode.String() || rep.LockTimeout != short.String() || len(rep.Tables) != len(tc.tables) || !strings.HasPrefix(rep.Tables[0], "public.") {
				t.Errorf("report header: %+v", rep)
			}
			for _, pid := range blockers {
				if !slices.Contains(rep.Blockers, pid) {
					t.Errorf("blockers %v, want pid %d among them", rep.Blockers, pid)
				}
				i := slices.IndexFunc(rep.Sessions, func(ls locks.Session) bool { return ls.PID == pid })
				if i < 0 {
					t.Errorf("blocker %d is not listed: %+v", pid, rep.Sessions)
					continue
				}
				if ls := rep.Sessions[i]; !ls.Blocking || !ls.Conflicts {
					t.Errorf("blocker %d listed as %+v, want blocking and conflicting", pid, ls)
				}
				if !strings.Contains(rep.Reason, fmt.Sprint(pid)) {
					t.Errorf("the reason does not name blocker %d: %s", pid, rep.Reason)
				}
			}
			if tc.acquired {
				if len(rep.Blockers) != 0 || !strings.Contains(rep.Reason, "taken in") || strings.Contains(rep.Reason, "not") {
					t.Errorf("acquired, yet blockers %v, reason %q", rep.Blockers, rep.Reason)
				}
			} else if !strings.Contains(rep.Reason, "not taken within "+short.String()) {
				t.Errorf("reason %q, want it to say the lock was not taken within %v", rep.Reason, short)
			}
			// The lock timeout bounds the wait; listing and connecting are
			// quick beside it.
			if limit := short + budget.Of(3*time.Second); took > limit {
				t.Errorf("took %v, want under %v", took, limit)
			}
			s.assertNothingLeft(t)
		})
	}
}

func TestLockPreflightNeverNull(t *testing.T) {
	s := startShop(t, "orders")
	rep, err := s.check(t, locks.AccessExclusive, time.Second, "orders")
	if err != nil || !rep.Acquired {
		t.Fatalf("%+v, %v", rep, err)
	}
	b, _ := json.Marshal(rep)
	for _, want := range []string{`"sessions":[]`, `"blockers":[]`, `"acquired":true`, `"lockTimeout":"1s"`, `"tables":["public.orders"]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s: %s", want, b)
		}
	}
}

func TestLockPreflightErrors(t *testing.T) {
	s := startShop(t, "orders", "payments")
	closed := fmt.Sprintf("postgres://app:%s@127.0.0.1:%d/shop?sslmode=disable&connect_timeout=5", appPassword, proctest.FreePort(t))
	for _, tc := range []struct {
		name   string
		dsn    string
		tables []string
		mode   locks.Mode
		want   []string
		secret string
	}{
		{"unknown table", s.dsn, []string{"orders", "nosuch"}, locks.AccessExclusive,
			[]string{`table "nosuch" does not exist`, "database shop"}, appPassword},
		{"unreachable server", closed, []string{"orders"}, locks.AccessExclusive,
			[]string{"connect to PostgreSQL", "refused"}, appPassword},
		{"wrong password", s.DSN("app", "Wr0ng-pa55word", "shop"), []string{"orders"}, locks.AccessExclusive,
			[]string{"connect to PostgreSQL", "password authentication failed", "28P01"}, "Wr0ng-pa55word"},
		{"no privilege for the mode", s.DSN("reader", readerPassword, "shop"), []string{"orders", "payments"}, locks.AccessExclusive,
			[]string{"user reader may not lock public.orders, public.payments in ACCESS EXCLUSIVE mode", "UPDATE, DELETE or TRUNCATE", "42501"}, readerPassword},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			rep, err := s.checkAs(t, tc.dsn, tc.mode, time.Second, tc.tables...)
			if err == nil {
				t.Fatalf("no error; report %+v", rep)
			}
			t.Logf("%v (in %v)", err, time.Since(start).Round(time.Millisecond))
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), tc.secret) {
				t.Errorf("the error shows the password: %v", err)
			}
			if limit := budget.Of(10 * time.Second); time.Since(start) > limit {
				t.Errorf("took %v, want under %v", time.Since(start), limit)
			}
		})
	}
	// Reading is allowed: the privilege the mode needs is what counts.
	if rep, err := s.checkAs(t, s.DSN("reader", readerPassword, "shop"), locks.AccessShare, time.Second, "orders"); err != nil || !rep.Acquired {
		t.Errorf("reader, ACCESS SHARE: %+v, %v", rep, err)
	}
}

// Ctrl-C while the attempt waits: Run returns at once, and PostgreSQL
// shows none of its sessions in a transaction or in the lock queue.
func TestLockPreflightCancelled(t *testing.T) {
	s := startShop(t, "orders")
	holder := s.session(t, "BEGIN", "LOCK TABLE orders IN ACCESS EXCLUSIVE MODE")
	d, err := locks.ParseDSN(s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(budget.Context(t, 30*time.Second))
	defer cancel()
	admin := s.Connect(t, "shop")
	go func() {
		// Cancelled once the attempt is queued, not before.
		_ = budget.Wait(budget.Of(10*time.Second), func() bool {
			var n int
			err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
				WHERE NOT l.granted AND a.application_name = $1`, locks.ApplicationName).Scan(&n)
			return err == nil && n > 0
		})
		time.Sleep(300 * time.Millisecond)
		cancel()
	}()
	start := time.Now()
	c := &locks.Check{DSN: d, Tables: []string{"orders"}, Mode: locks.AccessExclusive, LockTimeout: 10 * time.Second}
	rep, err := c.Run(ctx)
	took := time.Since(start)
	t.Logf("%v after %v", err, took.Round(time.Millisecond))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, %+v; want context.Canceled", err, rep)
	}
	if !strings.Contains(err.Error(), "no lock is held") {
		t.Errorf("error %q should say nothing is held", err)
	}
	if !slices.Contains(rep.Blockers, holder) {
		t.Errorf("blockers %v: the holder %d was named while the attempt waited", rep.Blockers, holder)
	}
	if limit := budget.Of(5 * time.Second); took > limit {
		t.Errorf("returned after %v, want well under the 10s lock timeout (%v)", took, limit)
	}
	s.assertNothingLeft(t)
}

// The password never shows, whatever form the DSN takes and however
// malformed it is.
func TestParseDSNNeverShowsThePassword(t *testing.T) {
	for _, tc := range []struct {
		name, dsn, secret string
	}{
		{"URL, bad port", "postgres://app:Sup3r-Secret@db.example:notaport/shop", "Sup3r-Secret"},
		{"URL, escaped password, bad port", "postgresql://app:p%40ss%2Fw0rd-xyz@db.example:99999/shop", "p@ss/w0rd-xyz"},
		{"URL, raw @ in the password", "postgres://app:h@rd-to-parse@db.example:54x/shop", "h@rd-to-parse"},
		{"URL, password in the query", "postgres://db.example:bad/shop?user=app&password=Qu3ry-Secret", "Qu3ry-Secret"},
		{"key=value, bad port", "host=db.example port=abc user=app password=Kv-Secret-1 dbname=shop", "Kv-Secret-1"},
		{"key=value, quoted", `host=db.example port=abc password='it\'s a secret' dbname=shop`, `it's a secret`},
		{"key=value, unterminated quote", `host=db.example password='never-closed dbname=shop`, "never-closed"},
		{"multi-host URL, bad port", "postgres://app:Mult1-Secret@h1:5432,h2:x/shop", "Mult1-Secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := locks.ParseDSN(tc.dsn)
			if err == nil {
				t.Fatalf("ParseDSN(%q) took it", tc.dsn)
			}
			for _, form := range []string{tc.secret, strings.ReplaceAll(tc.secret, "@", "%40")} {
				if strings.Contains(err.Error(), form) {
					t.Errorf("the error shows the password: %v", err)
				}
			}
		})
	}
}

// Scrub removes the password from any text, in every form a DSN could
// spell it, even where pgx would have left it.
func TestScrub(t *testing.T) {
	d, err := locks.ParseDSN("postgres://app:a%20b%2Fc@127.0.0.1:5432/shop")
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{"a b/c", "a%20b%2Fc", "a+b%2Fc"} {
		msg := d.Scrub(errors.New("server said: " + leak + " is wrong")).Error()
		if strings.Contains(msg, leak) || !strings.Contains(msg, "server said") {
			t.Errorf("Scrub(%q) = %q", leak, msg)
		}
	}
	inner := context.DeadlineExceeded
	if err := d.Scrub(fmt.Errorf("a b/c: %w", inner)); !errors.Is(err, inner) {
		t.Errorf("Scrub lost the wrapped error: %v", err)
	}
}
