// Package locks is the database-migration lock preflight. It answers one
// question before a release runs its database migration: could the
// migration take its lock now, or would it queue, and every write to the
// table queue behind it? (A retailer's releases broke that way: the
// migration's lock waited for autovacuum, and all writes waited for the
// migration.) It lists who holds or awaits locks on the tables, then
// takes the lock for real, bounded by a lock timeout, and releases it at
// once. It speaks to PostgreSQL only, and imports no runtime and nothing
// of commands/ or the rest of migrate/.
package locks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/shardctl/shardctl/internal/human"
)

// Lock preflight defaults.
const (
	DefaultLockTimeout = 2 * time.Second
	// DefaultLockPoll is how often a waiting attempt's blockers are read.
	DefaultLockPoll = 100 * time.Millisecond
	// firstPoll comes sooner, so a short lock timeout still names them.
	firstPoll = 20 * time.Millisecond
	// cleanupTimeout bounds the rollback and the goodbyes, which run on
	// a fresh context because the caller's may be cancelled already
	// (Ctrl-C): the transaction must end whatever happened.
	cleanupTimeout = 5 * time.Second
	// cancelGrace is how long a cancelled statement's server gets to
	// answer the cancel request before the connection is dropped.
	cancelGrace = 2 * time.Second
	// unresponsive is how long past its own timeouts a server may take
	// to answer before it is given up on.
	unresponsive = 5 * time.Second
	// Query text is cut to these lengths in the report and the table.
	queryJSONLen  = 1000
	queryTableLen = 80
)

// SQLSTATEs the preflight tells apart.
const (
	sqlstateLockNotAvailable   = "55P03"
	sqlstateQueryCanceled      = "57014"
	sqlstateInsufficientPriv   = "42501"
	sqlstateUndefinedParameter = "42704"
)

// Check is one lock preflight.
type Check struct {
	DSN *DSN
	// Tables as the migration names them: orders, public.orders.
	Tables      []string
	Mode        Mode
	LockTimeout time.Duration
	// Poll is how often the blockers of the waiting attempt are read
	// (DefaultLockPoll when 0).
	Poll time.Duration
}

// Report is what a preflight found; it is the -o json document.
type Report struct {
	// Tables as PostgreSQL resolved them, schema-qualified.
	Tables      []string  `json:"tables"`
	Mode        string    `json:"mode"`
	LockTimeout string    `json:"lockTimeout"`
	Sessions    []Session `json:"sessions"`
	Acquired    bool      `json:"acquired"`
	// WaitedSeconds is how long the attempt took, granted or not.
	WaitedSeconds float64 `json:"waitedSeconds"`
	// Blockers are the sessions PostgreSQL named as blocking the attempt
	// (pg_blocking_pids); 0 is a prepared transaction.
	Blockers []int  `json:"blockers"`
	Reason   string `json:"reason"`
}

// Verdict is the report in one line.
func (r Report) Verdict() string {
	return fmt.Sprintf("%s on %s: %s", r.Mode, strings.Join(r.Tables, ", "), r.Reason)
}

// Session is one lock, held or awaited, on one of the tables.
type Session struct {
	PID         int    `json:"pid"`
	User        string `json:"user"`
	Application string `json:"application"`
	BackendType string `json:"backendType"`
	State       string `json:"state"`
	Table       string `json:"table"`
	Mode        string `json:"mode"`
	Granted     bool   `json:"granted"`
	// Conflicts: the requested mode must wait for this lock.
	Conflicts bool `json:"conflicts"`
	// Blocking: PostgreSQL named this session as blocking the attempt.
	Blocking   bool       `json:"blocking"`
	Autovacuum bool       `json:"autovacuum"`
	XactStart  *time.Time `json:"xactStart,omitempty"`
	QueryStart *time.Time `json:"queryStart,omitempty"`
	// AgeSeconds is the age of its transaction (else of its query), by
	// the server's clock.
	AgeSeconds    float64 `json:"ageSeconds"`
	WaitEventType string  `json:"waitEventType,omitempty"`
	WaitEvent     string  `json:"waitEvent,omitempty"`
	Query         string  `json:"query"`
}

// ShortQuery is the query on one line, cut for a table.
func (s Session) ShortQuery() string {
	return cut(strings.Join(strings.Fields(s.Query), " "), queryTableLen)
}

// Describe says who the session is, in a few words.
func (s Session) Describe() string {
	who := fmt.Sprintf("pid %d", s.PID)
	if s.PID == 0 {
		who = "a prepared transaction"
	}
	var parts []string
	if s.Autovacuum {
		parts = append(parts, "autovacuum")
	} else if s.Application != "" {
		parts = append(parts, fmt.Sprintf("%q", s.Application))
	}
	if s.User != "" {
		parts = append(parts, "user "+s.User)
	}
	if s.State != "" {
		parts = append(parts, s.State+" for "+human.Seconds(s.AgeSeconds))
	}
	verb := "holds"
	if !s.Granted {
		verb = "waits ahead for"
	}
	parts = append(parts, fmt.Sprintf("%s %s on %s", verb, s.Mode, s.Table))
	if q := s.ShortQuery(); q != "" {
		parts = append(parts, q)
	}
	return who + " (" + strings.Join(parts, ", ") + ")"
}

// relation is a table as the server resolved it.
type relation struct {
	oid  uint32
	name string // schema-qualified, quoted where SQL needs it
}

// Run lists the sessions that hold or await locks on the tables, then
// takes the lock and releases it at once. A report with Acquired false
// is a refusal (the lock timeout passed); an error is anything else:
// the server cannot be reached, a table does not exist, a privilege is
// missing, ctx ended. Neither ever holds the DSN's password, and no
// lock or transaction outlives Run, even when ctx is cancelled.
func (c *Check) Run(ctx context.Context) (rep Report, err error) {
	defer func() {
		err = c.DSN.Scrub(err)
		rep = c.scrubReport(rep)
	}()
	rep = Report{Mode: c.Mode.String(), LockTimeout: c.LockTimeout.String(), Sessions: []Session{}, Blockers: []int{}}

	list, err := c.connect(ctx)
	if err != nil {
		return rep, err
	}
	defer closeConn(list)
	rels, err := resolveTables(ctx, list, c.Tables)
	if err != nil {
		return rep, err
	}
	for _, r := range rels {
		rep.Tables = append(rep.Tables, r.name)
	}

	attempt, err := c.connect(ctx)
	if err != nil {
		return rep, err
	}
	defer closeConn(attempt)
	if err := c.prepareAttempt(ctx, attempt); err != nil {
		return rep, err
	}
	own := []int32{int32(list.PgConn().PID()), int32(attempt.PgConn().PID())}
	if rep.Sessions, err = c.listSessions(ctx, list, rels, own, nil); err != nil {
		return rep, err
	}

	res := c.try(ctx, list, attempt, rels)
	rep.WaitedSeconds = res.took.Seconds()
	rep.Blockers = append(rep.Blockers, res.blockers...)
	switch {
	case res.err == nil:
		rep.Acquired = true
		rep.Reason = fmt.Sprintf("taken in %s and released", human.Latency(res.took.Seconds()))
		return rep, nil
	case ctx.Err() != nil:
		return rep, fmt.Errorf("interrupted while waiting for %s on %s after %s: the attempt was cancelled and rolled back, no lock is held: %w",
			c.Mode, strings.Join(rep.Tables, ", "), human.Latency(res.took.Seconds()), ctx.Err())
	case !notTaken(res.err):
		return rep, c.attemptError(ctx, list, rels, res.err)
	}
	// Listed again: the sessions that blocked the attempt may have come
	// after the first listing.
	if rep.Sessions, err = c.listSessions(ctx, list, rels, own, res.blockers); err != nil {
		return rep, err
	}
	rep.Reason = c.refusal(rep, res.err)
	return rep, nil
}

// connect opens one of the preflight's two sessions. A cancelled context
// sends PostgreSQL a cancel request rather than dropping the connection:
// a backend whose client vanished keeps waiting in the lock queue until
// its lock timeout, and every writer queues behind it meanwhile.
func (c *Check) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg := c.DSN.config.Copy()
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: cancelGrace}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL (%s): %w", c.DSN.Where(), err)
	}
	return conn, nil
}

// closeConn ends a session on a fresh context: the server rolls back any
// transaction of a session that says goodbye.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_ = conn.Close(ctx)
}

// prepareAttempt bounds what the attempt's session may hold should this
// process freeze or vanish: the server ends it once idle in a
// transaction for the lock timeout, and (PostgreSQL 14+) notices a
// client gone while it still waits.
func (c *Check) prepareAttempt(ctx context.Context, conn *pgx.Conn) error {
	set := fmt.Sprintf("SET idle_in_transaction_session_timeout = '%dms'", millis(c.LockTimeout))
	if _, err := conn.Exec(ctx, set); err != nil {
		return fmt.Errorf("%s: %w", set, err)
	}
	const check = "SET client_connection_check_interval = '100ms'"
	_, err := conn.Exec(ctx, check)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == sqlstateUndefinedParameter:
		return nil // before PostgreSQL 14: the lock timeout alone bounds the wait
	case err != nil:
		return fmt.Errorf("%s: %w", check, err)
	}
	return nil
}

// millis is d in whole milliseconds, rounded up: PostgreSQL reads 0 as
// "no timeout".
func millis(d time.Duration) int64 {
	return max(1, int64((d+time.Millisecond-1)/time.Millisecond))
}

// resolveTables finds each table as the session's search_path does, and
// says which one does not exist.
func resolveTables(ctx context.Context, conn *pgx.Conn, tables []string) ([]relation, error) {
	var out []relation
	for _, t := range tables {
		var r relation
		err := conn.QueryRow(ctx, `SELECT c.oid, format('%I.%I', n.nspname, c.relname)
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE c.oid = to_regclass($1)`, t).Scan(&r.oid, &r.name)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return nil, fmt.Errorf("table %q does not exist in database %s (or not in the search_path of user %s): check --table",
				t, conn.Config().Database, conn.Config().User)
		case err != nil:
			return nil, fmt.Errorf("look up table %q: %w", t, err)
		}
		if !slices.ContainsFunc(out, func(o relation) bool { return o.oid == r.oid }) {
			out = append(out, r)
		}
	}
	return out, nil
}

// sessionsSQL lists relation locks on the tables (and, after a refused
// attempt, every table lock of the sessions that blocked it, which may
// hold a partition or a child table rather than the table named). A
// prepared transaction holds locks without a process: pid 0, known by
// the lock on its transaction id that shares its virtual transaction.
const sessionsSQL = `
SELECT coalesce(l.pid, 0),
       coalesce(a.usename, p.owner::text, ''),
       coalesce(a.application_name, ''),
       coalesce(a.backend_type, ''),
       CASE WHEN l.pid IS NULL THEN 'prepared' ELSE coalesce(a.state, '') END,
       format('%I.%I', n.nspname, c.relname),
       l.mode, l.granted,
       coalesce(a.xact_start, p.prepared),
       a.query_start,
       coalesce(extract(epoch FROM clock_timestamp() - coalesce(a.xact_start, p.prepared, a.query_start, a.backend_start)), 0)::float8,
       coalesce(a.wait_event_type, ''), coalesce(a.wait_event, ''),
       CASE WHEN l.pid IS NULL THEN coalesce('PREPARE TRANSACTION ' || quote_literal(p.gid), '') ELSE coalesce(a.query, '') END
FROM pg_locks l
JOIN pg_class c ON c.oid = l.relation
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
LEFT JOIN pg_locks x ON l.pid IS NULL AND x.pid IS NULL AND x.locktype = 'transactionid' AND x.virtualtransaction = l.virtualtransaction
LEFT JOIN pg_prepared_xacts p ON p.transaction = x.transactionid
WHERE l.locktype = 'relation'
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND coalesce(l.pid, 0) <> ALL($2::int4[])
  AND (l.relation = ANY($1::oid[]) OR (coalesce(l.pid, 0) = ANY($3::int4[]) AND c.relkind IN ('r', 'p')))`

// listSessions reads who holds or awaits locks on the tables, leaving out
// the preflight's own sessions, and marks those that conflict with the
// requested mode and those PostgreSQL named as blockers.
func (c *Check) listSessions(ctx context.Context, conn *pgx.Conn, rels []relation, own []int32, blockers []int) ([]Session, error) {
	oids := make([]uint32, len(rels))
	for i, r := range rels {
		oids[i] = r.oid
	}
	blocking := make([]int32, len(blockers))
	for i, b := range blockers {
		blocking[i] = int32(b)
	}
	rows, err := conn.Query(ctx, sessionsSQL, oids, own, blocking)
	if err != nil {
		return nil, fmt.Errorf("list the sessions locking %s: %w", names(rels), err)
	}
	out := []Session{}
	for rows.Next() {
		var s Session
		if err := rows.Scan(&s.PID, &s.User, &s.Application, &s.BackendType, &s.State, &s.Table, &s.Mode, &s.Granted,
			&s.XactStart, &s.QueryStart, &s.AgeSeconds, &s.WaitEventType, &s.WaitEvent, &s.Query); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list the sessions locking %s: %w", names(rels), err)
		}
		out = append(out, c.classify(s, blockers))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the sessions locking %s: %w", names(rels), err)
	}
	slices.SortStableFunc(out, func(a, b Session) int {
		if d := rank(b) - rank(a); d != 0 {
			return d
		}
		if d := cmp.Compare(b.AgeSeconds, a.AgeSeconds); d != 0 {
			return d
		}
		return a.PID - b.PID
	})
	return out, nil
}

// rank puts blockers first, then conflicting locks, then held ones.
func rank(s Session) int {
	r := 0
	if s.Blocking {
		r += 4
	}
	if s.Conflicts {
		r += 2
	}
	if s.Granted {
		r++
	}
	return r
}

func (c *Check) classify(s Session, blockers []int) Session {
	if m, ok := modeOfPgLocks(s.Mode); ok {
		s.Mode = m.String()
		s.Conflicts = c.Mode.ConflictsWith(m)
	}
	s.Blocking = slices.Contains(blockers, s.PID)
	s.Autovacuum = s.BackendType == "autovacuum worker" || strings.HasPrefix(s.Query, "autovacuum:")
	s.Query = cut(s.Query, queryJSONLen)
	return s
}

func names(rels []relation) string {
	var n []string
	for _, r := range rels {
		n = append(n, r.name)
	}
	return strings.Join(n, ", ")
}

// attemptResult is how the LOCK went.
type attemptResult struct {
	took     time.Duration
	err      error
	blockers []int // in the order first seen
}

// lockSQL is the attempt, sent as one message so that no round trip
// leaves the transaction idle before the LOCK. lock_timeout bounds the
// wait for each table; with several tables those waits add up, so the
// statement timeout bounds their sum.
func (c *Check) lockSQL(rels []relation) string {
	ms := millis(c.LockTimeout)
	var b strings.Builder
	fmt.Fprintf(&b, "BEGIN; SET LOCAL lock_timeout = '%dms'; ", ms)
	if len(rels) > 1 {
		fmt.Fprintf(&b, "SET LOCAL statement_timeout = '%dms'; ", ms)
	}
	fmt.Fprintf(&b, "LOCK TABLE %s IN %s MODE", names(rels), c.Mode)
	return b.String()
}

// try takes the lock on attempt and rolls back at once, while list asks
// PostgreSQL who blocks the attempt.
func (c *Check) try(ctx context.Context, list, attempt *pgx.Conn, rels []relation) attemptResult {
	// The server's timeouts bound the wait; this bounds a server or a
	// network that stops answering altogether.
	actx, cancel := context.WithTimeout(ctx, c.LockTimeout+unresponsive)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := attempt.Exec(actx, c.lockSQL(rels))
		done <- err
	}()
	var res attemptResult
	poll := time.NewTimer(firstPoll)
	defer poll.Stop()
	for {
		select {
		case err := <-done:
			res.took = time.Since(start)
			res.err = err
			if err != nil && actx.Err() != nil && ctx.Err() == nil {
				res.err = fmt.Errorf("PostgreSQL did not answer within %v of the lock timeout (%v)", unresponsive, err)
			}
			// At once: a transaction aborted by the lock timeout still
			// holds the tables it locked before the one it waited for.
			c.end(list, attempt)
			return res
		case <-poll.C:
			if ctx.Err() == nil {
				res.blockers = appendNew(res.blockers, blockingPIDs(ctx, list, attempt.PgConn().PID()))
			}
			poll.Reset(c.poll())
		}
	}
}

func (c *Check) poll() time.Duration {
	if c.Poll > 0 {
		return c.Poll
	}
	return DefaultLockPoll
}

// end rolls the attempt back on a fresh context. Should its connection
// be gone already (the cancel request went unanswered), the server may
// still have the backend waiting in the lock queue: the other session
// ends it.
func (c *Check) end(list, attempt *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if !attempt.IsClosed() {
		if _, err := attempt.Exec(ctx, "ROLLBACK"); err == nil {
			return
		}
	}
	pid := attempt.PgConn().PID()
	_ = attempt.Close(ctx)
	if !list.IsClosed() {
		_, _ = list.Exec(ctx, "SELECT pg_terminate_backend($1)", int32(pid))
	}
}

// blockingPIDs asks PostgreSQL which sessions the attempt waits for. A
// failed read names no one: the attempt's own outcome decides.
func blockingPIDs(ctx context.Context, conn *pgx.Conn, pid uint32) []int {
	ctx, cancel := context.WithTimeout(ctx, unresponsive)
	defer cancel()
	var pids []int32
	if err := conn.QueryRow(ctx, "SELECT pg_blocking_pids($1)", int32(pid)).Scan(&pids); err != nil {
		return nil
	}
	out := make([]int, len(pids))
	for i, p := range pids {
		out[i] = int(p)
	}
	return out
}

func appendNew(list, more []int) []int {
	for _, p := range more {
		if !slices.Contains(list, p) {
			list = append(list, p)
		}
	}
	return list
}

// notTaken reports whether the attempt failed because the lock did not
// come in time: the lock timeout, or the statement timeout that bounds
// several tables, or a DBA cancelling the wait.
func notTaken(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == sqlstateLockNotAvailable || pgErr.Code == sqlstateQueryCanceled)
}

// attemptError explains an attempt that failed for another reason than
// time, naming the tables and the privilege when one is missing.
func (c *Check) attemptError(ctx context.Context, list *pgx.Conn, rels []relation, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != sqlstateInsufficientPriv {
		return fmt.Errorf("LOCK TABLE %s IN %s MODE: %w", names(rels), c.Mode, err)
	}
	var version int
	_ = list.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version)
	privs := c.Mode.privileges(version)
	lacking := names(rels)
	if missing := missingPrivilege(ctx, list, rels, privs); len(missing) > 0 {
		lacking = strings.Join(missing, ", ")
	}
	return fmt.Errorf("user %s may not lock %s in %s mode: it needs %s on the table (%w); grant it, or run the preflight as the role the migration runs as",
		list.Config().User, lacking, c.Mode, orList(privs), err)
}

// missingPrivilege lists the tables on which the session's user has none
// of privs.
func missingPrivilege(ctx context.Context, conn *pgx.Conn, rels []relation, privs []string) []string {
	var out []string
	for _, r := range rels {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT has_table_privilege($1::oid, $2)", r.oid, strings.Join(privs, ", ")).Scan(&ok); err == nil && !ok {
			out = append(out, r.name)
		}
	}
	return out
}

func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// refusal says why the lock was not taken and by whom.
func (c *Check) refusal(rep Report, err error) string {
	why := fmt.Sprintf("not taken within %s", c.LockTimeout)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == sqlstateQueryCanceled && !strings.Contains(pgErr.Message, "statement timeout") {
		why = "the wait was cancelled on the server (" + pgErr.Message + ")"
	}
	var blockers, conflicting []string
	autovacuum := false
	for _, s := range rep.Sessions {
		switch {
		case s.Blocking:
			blockers = append(blockers, s.Describe())
			autovacuum = autovacuum || s.Autovacuum
		case s.Conflicts:
			conflicting = append(conflicting, s.Describe())
		}
	}
	for _, pid := range rep.Blockers {
		if !slices.ContainsFunc(rep.Sessions, func(s Session) bool { return s.PID == pid }) {
			blockers = append(blockers, fmt.Sprintf("pid %d (gone by the time it was listed)", pid))
		}
	}
	switch {
	case len(blockers) > 0:
		why += ": blocked by " + strings.Join(blockers, "; ")
		if len(conflicting) > 0 {
			// LOCK takes the tables one at a time and waits for the
			// blockers of one table only: past them, these are next.
			why += "; also in its way: " + strings.Join(conflicting, "; ")
		}
	case len(conflicting) > 0:
		why += ": conflicting locks are held by " + strings.Join(conflicting, "; ")
	}
	why += "; the attempt was rolled back"
	if autovacuum {
		why += ". Autovacuum gives way to a waiting lock unless it runs to prevent wraparound: wait for it to finish before the release"
	}
	return why
}

// scrubReport takes the DSN's password out of every text the server
// sent: another session's query may well be the ALTER ROLE that set it.
func (c *Check) scrubReport(rep Report) Report {
	rep.Reason = c.DSN.ScrubString(rep.Reason)
	for i := range rep.Sessions {
		rep.Sessions[i].Query = c.DSN.ScrubString(rep.Sessions[i].Query)
		rep.Sessions[i].Application = c.DSN.ScrubString(rep.Sessions[i].Application)
	}
	return rep
}

// cut shortens s to n characters, marking the cut.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
