// Package pgtest runs a real PostgreSQL server for a test: initdb into a
// folder of its own, postgres on a free 127.0.0.1 port, stopped and
// removed when the test ends. The migration lock preflight is about what
// PostgreSQL's lock manager does, which no fake reproduces.
//
// PostgreSQL refuses to run as root, and the tests run as root here and in
// CI: as root, the server runs as the OS user "postgres" that Debian's
// package creates.
// Tests only: no runtime or tool imports it outside its tests.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/proctest"
)

// EnvNoPostgres, when set, skips the tests that need PostgreSQL instead of
// failing them: for a machine where it cannot be installed. CI installs it
// (scripts/test.sh), so there a missing server is a failure.
const EnvNoPostgres = "SHARDCTL_TEST_NO_POSTGRES"

// Superuser and Password are the server's superuser and its password. The
// server asks for the password over TCP (scram-sha-256), so a test of a
// wrong password meets a real refusal.
const (
	Superuser = "postgres"
	Password  = "pgtest-superuser-secret"
)

// osUser is who runs the server when the test runs as root.
const osUser = "postgres"

// Server is a running PostgreSQL server.
type Server struct {
	Host string // 127.0.0.1
	Port int
	// Dir holds the data folder and the Unix socket.
	Dir string

	cmd  *exec.Cmd
	logs *proctest.LockedBuffer
	done chan struct{}
}

// Options change how Start runs the server.
type Options struct {
	// Port to listen on; 0 picks a free one.
	Port int
}

// Start runs a fresh server until the test ends.
func Start(t testing.TB) *Server { return StartWith(t, Options{}) }

// StartWith is Start with options.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	bin, err := binDir()
	if err != nil {
		if os.Getenv(EnvNoPostgres) != "" {
			t.Skipf("PostgreSQL not installed and %s is set: %v", EnvNoPostgres, err)
		}
		t.Fatalf("PostgreSQL is needed by this test and not installed (%v): make test installs the Debian package postgresql "+
			"(scripts/install-debs.sh postgresql); set %s=1 to skip these tests instead", err, EnvNoPostgres)
	}
	cred, err := credential()
	if err != nil {
		t.Fatal(err)
	}
	dir := serverDir(t, cred)
	s := &Server{Host: "127.0.0.1", Port: o.Port, Dir: dir, logs: &proctest.LockedBuffer{}, done: make(chan struct{})}
	if s.Port == 0 {
		s.Port = proctest.FreePort(t)
	}
	s.initdb(t, bin, cred)
	s.start(t, bin, cred)
	return s
}

// binDir finds the folder holding both initdb and postgres: the one of
// initdb on PATH, else the newest /usr/lib/postgresql/N/bin, where
// Debian's package puts them without adding them to PATH.
func binDir() (string, error) {
	var dirs []string
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	dirs = append(dirs, debianBinDirs()...)
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errors.New("no initdb and postgres on PATH or in /usr/lib/postgresql/*/bin")
}

// debianBinDirs are /usr/lib/postgresql/N/bin, newest version first.
func debianBinDirs() []string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(d string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(d)), 64)
		return v
	}
	slices.SortFunc(dirs, func(a, b string) int { return int(version(b)*100) - int(version(a)*100) })
	return dirs
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// credential is who the server runs as: nil for the test's own user, the
// postgres OS user when the test runs as root.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(osUser)
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL must run as the OS user %q, which does not exist (Debian's postgresql package creates it): %w", osUser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// serverDir makes the server's folder, owned by whoever runs the server.
// t.TempDir's folders are private to the test's user, so the postgres
// user could not reach one: the folder sits directly in the temporary
// directory, and is removed when the test ends.
func serverDir(t testing.TB, cred *syscall.Credential) string {
	t.Helper()
	dir, err := os.MkdirTemp(os.TempDir(), "shardctl-pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if cred != nil {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
		if blocked := untraversable(filepath.Dir(dir)); blocked != "" {
			t.Fatalf("the OS user %s cannot reach %s (%s is not world-searchable): set TMPDIR to a folder it can reach, e.g. /tmp", osUser, dir, blocked)
		}
	}
	return dir
}

// untraversable names the first folder on the way to dir that users
// other than its owner cannot enter, or "".
func untraversable(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err != nil || fi.Mode()&0o001 == 0 {
			return d
		}
		if d == filepath.Dir(d) {
			return ""
		}
	}
}

func (s *Server) dataDir() string { return filepath.Join(s.Dir, "data") }

// initdb creates the cluster: trust over the Unix socket (only the test's
// folder holds it), passwords over TCP.
func (s *Server) initdb(t testing.TB, bin string, cred *syscall.Credential) {
	t.Helper()
	pwfile := filepath.Join(s.Dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		if err := os.Chown(pwfile, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	ctx := budget.Context(t, 60*time.Second)
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", s.dataDir(), "-U", Superuser, "--pwfile", pwfile,
		"--auth-local=trust", "--auth-host=scram-sha-256", "--encoding=UTF8", "--locale=C", "--no-sync")
	s.prepare(cmd, cred)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	os.Remove(pwfile)
}

// prepare runs cmd as cred (when set) in the server's folder, with an
// environment that neither the test's locale nor its PG* variables
// change.
func (s *Server) prepare(cmd *exec.Cmd, cred *syscall.Credential) {
	cmd.Dir = s.Dir
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C", "HOME=" + s.Dir}
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
}

// start runs postgres and waits until it accepts connections.
func (s *Server) start(t testing.TB, bin string, cred *syscall.Credential) {
	t.Helper()
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", s.dataDir(), "-k", s.Dir, "-p", strconv.Itoa(s.Port),
		"-c", "listen_addresses="+s.Host,
		// A test server keeps nothing worth a flush to disk.
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=40", "-c", "shared_buffers=16MB",
		// Prepared transactions hold locks with no session: tests make them.
		"-c", "max_prepared_transactions=10")
	s.prepare(s.cmd, cred)
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(s.stop)
	ready := func() bool {
		select {
		case <-s.done:
			return true
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, s.DSN(Superuser, Password, "postgres"))
		if err != nil {
			return false
		}
		c.Close(ctx)
		return true
	}
	if err := budget.Wait(budget.Of(30*time.Second), ready); err != nil {
		t.Fatalf("postgres on %s:%d does not accept connections: %v\n%s", s.Host, s.Port, err, s.logs.String())
	}
	select {
	case <-s.done:
		t.Fatalf("postgres on %s:%d ended at start:\n%s", s.Host, s.Port, s.logs.String())
	default:
	}
}

// stop asks for a fast shutdown (SIGINT: sessions are ended, their
// transactions rolled back) and kills the server if it lingers.
func (s *Server) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
	case <-time.After(budget.Of(15 * time.Second)):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// Logs is what the server wrote so far.
func (s *Server) Logs() string { return s.logs.String() }

// DSN is a URL connection string to database db as user with password
// (none when empty), over TCP.
func (s *Server) DSN(user, password, db string) string {
	u := url.URL{Scheme: "postgres", Host: fmt.Sprintf("%s:%d", s.Host, s.Port), Path: "/" + db, RawQuery: "sslmode=disable"}
	if password != "" {
		u.User = url.UserPassword(user, password)
	} else {
		u.User = url.User(user)
	}
	return u.String()
}

// Connect opens a connection to db as the superuser, closed when the test
// ends.
func (s *Server) Connect(t testing.TB, db string) *pgx.Conn {
	t.Helper()
	ctx := budget.Context(t, 10*time.Second)
	c, err := pgx.Connect(ctx, s.DSN(Superuser, Password, db))
	if err != nil {
		t.Fatalf("connect to %s as %s: %v", db, Superuser, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	return c
}

// Session opens a connection to dsn that runs statements and keeps what
// they took (locks, an open transaction) until the test ends, and returns
// its backend's pid.
func Session(t testing.TB, dsn string, statements ...string) int {
	t.Helper()
	ctx := budget.Context(t, 10*time.Second)
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	for _, st := range statements {
		if _, err := c.Exec(ctx, st); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
	}
	return int(c.PgConn().PID())
}

// Exec runs each statement in database db as the superuser, on one
// connection closed before it returns, and fails the test on the first
// error.
func (s *Server) Exec(t testing.TB, db string, statements ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), budget.Of(30*time.Second))
	defer cancel()
	c, err := pgx.Connect(ctx, s.DSN(Superuser, Password, db))
	if err != nil {
		t.Fatalf("connect to %s as %s: %v", db, Superuser, err)
	}
	defer c.Close(context.Background())
	for _, st := range statements {
		if _, err := c.Exec(ctx, st); err != nil {
			t.Fatalf("%s: %v", strings.TrimSpace(st), err)
		}
	}
}
