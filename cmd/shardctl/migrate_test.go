package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardctl/shardctl/commands/cutover"
	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/pgtest"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/migrate/locks"
)

const migratePassword = "cli-app-pw-4Tx9"

// startShop runs PostgreSQL with a database shop owned by the role app
// (password migratePassword), holding tables orders and payments.
func startShop(t *testing.T, port int) *pgtest.Server {
	t.Helper()
	s := pgtest.StartWith(t, pgtest.Options{Port: port})
	s.Exec(t, "postgres", "CREATE ROLE app LOGIN PASSWORD '"+migratePassword+"'", "CREATE DATABASE shop OWNER app")
	s.Exec(t, "shop", "CREATE TABLE orders (id bigint PRIMARY KEY, note text)", "CREATE TABLE payments (id bigint PRIMARY KEY)",
		"ALTER TABLE orders OWNER TO app", "ALTER TABLE payments OWNER TO app")
	return s
}

// holdLock opens a session that keeps lock on table until the test ends,
// and returns its pid.
func holdLock(t *testing.T, s *pgtest.Server, statements ...string) int {
	t.Helper()
	return pgtest.Session(t, s.DSN("app", migratePassword, "shop"), statements...)
}

// preflightSessions lists the preflight's sessions that are in a
// transaction or waiting for a lock.
func preflightSessions(t *testing.T, admin *pgx.Conn) []string {
	t.Helper()
	rows, err := admin.Query(context.Background(), `SELECT a.pid || ' ' || coalesce(a.state, '') || ' ' ||
			coalesce((SELECT string_agg(mode || CASE WHEN granted THEN '' ELSE ' (waiting)' END, ',') FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'relation'), '')
		FROM pg_stat_activity a WHERE a.application_name = $1 AND (a.xact_start IS NOT NULL OR a.state IN ('active', 'idle in transaction'))`,
		locks.ApplicationName)
	if err != nil {
		t.Fatal(err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return left
}

// Exit codes as a pipeline sees them: 0 taken, 3 held by someone, 1
// unreachable or refused login (never showing the password), 2 bad flags.
func TestMigrateLocksExitCodes(t *testing.T) {
	t.Parallel()
	s := startShop(t, 0)
	holder := holdLock(t, s, "BEGIN", "LOCK TABLE payments IN ROW EXCLUSIVE MODE")
	// The password comes from the environment, as the help advises.
	env := append(baseEnv(), "PGPASSWORD="+migratePassword)
	dsn := s.DSN("app", "", "shop")
	closed := fmt.Sprintf("postgres://app:%s@127.0.0.1:%d/shop", migratePassword, proctest.FreePort(t))

	for _, tc := range []struct {
		name   string
		env    []string
		args   []string
		code   int
		stdout []string
		stderr []string
	}{
		{"free", env, []string{"--dsn", dsn, "--table", "orders"}, 0,
			nil, []string{"no other session holds or waits for a lock on public.orders", "ACCESS EXCLUSIVE on public.orders: taken in"}},
		{"free, DSN from the environment", append(env, cutover.EnvMigrateDSN+"="+dsn), []string{"--table", "orders", "--mode", "share"}, 0,
			nil, []string{"SHARE on public.orders: taken in"}},
		{"held", env, []string{"--dsn", dsn, "--table", "orders,payments", "--lock-timeout", "300ms"}, 3,
			[]string{"PID", fmt.Sprint(holder), "ROW EXCLUSIVE", "BLOCKING", "idle in transaction"},
			[]string{"error: ACCESS EXCLUSIVE on public.orders, public.payments: not taken within 300ms: blocked by pid " + fmt.Sprint(holder)}},
		{"held, a mode that does not conflict", env, []string{"--dsn", dsn, "--table", "payments", "--mode", "row-exclusive"}, 0,
			[]string{fmt.Sprint(holder), "ROW EXCLUSIVE"}, []string{"ROW EXCLUSIVE on public.payments: taken in"}},
		{"unreachable", baseEnv(), []string{"--dsn", closed, "--table", "orders"}, 1,
			nil, []string{"connect to PostgreSQL", "connection refused"}},
		{"wrong password", baseEnv(), []string{"--dsn", s.DSN("app", "Wr0ng-"+migratePassword, "shop"), "--table", "orders"}, 1,
			nil, []string{"password authentication failed"}},
		{"unknown table", env, []string{"--dsn", dsn, "--table", "orders,nosuch"}, 1,
			nil, []string{`table "nosuch" does not exist`}},
		{"unparsable DSN", baseEnv(), []string{"--dsn", "postgres://app:" + migratePassword + "@127.0.0.1:bad/shop", "--table", "orders"}, 2,
			nil, []string{"--dsn: parse the PostgreSQL DSN", "xxxxx"}},
		{"unknown mode", env, []string{"--dsn", dsn, "--table", "orders", "--mode", "exclusif"}, 2, nil, []string{"--mode"}},
		{"no table", env, []string{"--dsn", dsn}, 2, nil, []string{"--table"}},
		{"no timeout", env, []string{"--dsn", dsn, "--table", "orders", "--lock-timeout", "0s"}, 2, nil, []string{"--lock-timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runBin(t, bin, tc.env, "", append([]string{"migrate", "locks"}, tc.args...)...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, tc.code, r.stdout, r.stderr)
			}
			for _, w := range tc.stdout {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, r.stdout)
				}
			}
			for _, w := range tc.stderr {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			for _, out := range []string{r.stdout, r.stderr} {
				if strings.Contains(out, migratePassword) {
					t.Errorf("the output shows the password:\n%s", out)
				}
			}
		})
	}

	r := runBin(t, bin, env, "", "migrate", "locks", "--dsn", dsn, "--table", "payments", "--lock-timeout", "300ms", "-o", "json")
	var rep locks.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 3 {
		t.Fatalf("-o json: exit %d, %v\n%s", r.code, err, r.stdout)
	}
	if rep.Acquired || len(rep.Blockers) != 1 || rep.Blockers[0] != holder || len(rep.Sessions) != 1 || !rep.Sessions[0].Blocking {
		t.Errorf("-o json: %+v", rep)
	}
}

// Ctrl-C while the attempt waits: the process ends at once, and leaves
// no transaction open and no lock request queued.
func TestMigrateLocksInterrupted(t *testing.T) {
	t.Parallel()
	s := startShop(t, 0)
	holdLock(t, s, "BEGIN", "LOCK TABLE orders IN ACCESS SHARE MODE")
	admin := s.Connect(t, "shop")

	cmd := exec.Command(bin, "migrate", "locks", "--dsn", s.DSN("app", "", "shop"), "--table", "orders", "--lock-timeout", "30s")
	cmd.Env = append(baseEnv(), "PGPASSWORD="+migratePassword)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	budget.Eventually(t, 15*time.Second, "the attempt to queue for its lock", func() bool {
		for _, l := range preflightSessions(t, admin) {
			if strings.Contains(l, "(waiting)") {
				return true
			}
		}
		return false
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case <-done:
	case <-time.After(budget.Of(5 * time.Second)):
		t.Fatalf("still running %v after SIGINT\n%s", budget.Of(5*time.Second), stderr.String())
	}
	t.Logf("ended %v after SIGINT: exit %d: %s", time.Since(start).Round(time.Millisecond), cmd.ProcessState.ExitCode(), strings.TrimSpace(stderr.String()))
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(stderr.String(), "no lock is held") {
		t.Errorf("exit %d, stderr %q; want 1 and that nothing is held", code, stderr.String())
	}
	var left []string
	if err := budget.Wait(budget.Of(5*time.Second), func() bool { left = preflightSessions(t, admin); return len(left) == 0 }); err != nil {
		t.Errorf("after SIGINT the preflight's sessions are still in a transaction: %q", left)
	}
}
