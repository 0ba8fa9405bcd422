package pgtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardctl/shardctl/internal/budget"
)

// The server is real: it runs SQL, and over TCP it wants the password.
func TestStart(t *testing.T) {
	start := time.Now()
	s := Start(t)
	t.Logf("initdb and start took %v", time.Since(start).Round(time.Millisecond))
	s.Exec(t, "postgres", "CREATE ROLE app LOGIN PASSWORD 'app-pw'", "CREATE DATABASE shop OWNER app")

	ctx := budget.Context(t, 10*time.Second)
	c, err := pgx.Connect(ctx, s.DSN("app", "app-pw", "shop"))
	if err != nil {
		t.Fatalf("connect as app: %v", err)
	}
	defer c.Close(ctx)
	var user string
	if err := c.QueryRow(ctx, "SELECT current_user").Scan(&user); err != nil || user != "app" {
		t.Fatalf("current_user %q, %v", user, err)
	}

	_, err = pgx.Connect(ctx, s.DSN("app", "wrong", "shop"))
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "28P01" {
		t.Fatalf("a wrong password: %v, want SQLSTATE 28P01 (invalid_password)", err)
	}
}

// Stopping ends the server: nothing answers on its port afterwards.
func TestStopEndsTheServer(t *testing.T) {
	var s *Server
	t.Run("run", func(t *testing.T) { s = Start(t) })
	select {
	case <-s.done:
	default:
		t.Fatal("the server still runs after its test ended")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := pgx.Connect(ctx, s.DSN(Superuser, Password, "postgres")); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("connect after stop: %v, want connection refused", err)
	}
}

// Debian's package puts the binaries under /usr/lib/postgresql/N/bin and
// not on PATH: they are found there all the same.
func TestBinDirWithoutPath(t *testing.T) {
	debian := debianBinDirs()
	if len(debian) == 0 {
		t.Skip("no /usr/lib/postgresql/*/bin on this machine")
	}
	t.Setenv("PATH", t.TempDir())
	got, err := binDir()
	if err != nil || got != debian[0] {
		t.Errorf("binDir() = %q, %v; want the newest Debian folder %q", got, err, debian[0])
	}
}
