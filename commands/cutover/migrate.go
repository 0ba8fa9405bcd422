package cutover

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/commands/cmdutil"
	"github.com/shardctl/shardctl/commands/output"
	"github.com/shardctl/shardctl/completions"
	"github.com/shardctl/shardctl/internal/human"
	"github.com/shardctl/shardctl/migrate/locks"
)

// EnvMigrateDSN is the connection string of migrate locks when --dsn is
// not given; without either, libpq's PG* variables apply.
const EnvMigrateDSN = "SHARDCTL_MIGRATE_DSN"

// NewCmdMigrate builds `shardctl migrate`, the preflights of a release's
// database migration.
func NewCmdMigrate(g *cmdutil.Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "migrate",
		Short:   "Preflights for a release's database migration",
		GroupID: cmdutil.GroupOperate,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return cmdutil.Usagef("missing subcommand: use locks")
		},
	}
	cmd.AddCommand(newCmdMigrateLocks(g))
	return cmd
}

// MigrateLocksOptions checks that a migration could take its table locks.
type MigrateLocksOptions struct {
	g           *cmdutil.Globals
	dsnFlag     string
	tables      []string
	mode        string
	lockTimeout time.Duration

	check   locks.Check
	printer *output.Printer
}

func newCmdMigrateLocks(g *cmdutil.Globals) *cobra.Command {
	o := &MigrateLocksOptions{g: g}
	cmd := &cobra.Command{
		Use:   "locks --table NAME[,NAME]",
		Short: "Check that a migration could lock its tables now, and name who holds them if not",
		Long: `Before a release runs its database migration, check that the migration could
take its locks now rather than queue for them. A migration queued for a lock
makes every later query on the table queue behind it: a release whose
ALTER TABLE waits for a long transaction, or for autovacuum, stops every write
to the table until it gets through.

The check lists the sessions that hold or wait for locks on the tables
(pg_locks joined to pg_stat_activity: user, application, state, how long,
autovacuum or not, the lock mode, whether it conflicts with --mode, and the
query), then takes the lock for real on a second session: BEGIN, LOCK TABLE
… IN --mode MODE with lock_timeout set to --lock-timeout, and ROLLBACK at
once. While it waits, PostgreSQL is asked every 100ms who blocks it
(pg_blocking_pids), so the report names them exactly.

No lock is held longer than --lock-timeout and no transaction is left open,
Ctrl-C included: a cancelled wait is cancelled on the server, rolled back,
and the sessions are closed; the attempt's session also has
idle_in_transaction_session_timeout set, should this process freeze. Both
sessions are named "` + locks.ApplicationName + `" in pg_stat_activity and
are left out of the report.

The DSN (a URL or key=value libpq string) is --dsn, else $` + EnvMigrateDSN + `,
else libpq's environment (PGHOST, PGPORT, PGDATABASE, PGUSER, PGPASSWORD,
PGSERVICE, PGSSLMODE, …, and ~/.pgpass). Prefer PGPASSWORD or ~/.pgpass to a
password in --dsn, which other users may see in the process list; either way
the password never appears in the output or in an error.

Connect as the role the migration runs as: LOCK needs the same privileges
(SELECT for access-share; INSERT, UPDATE, DELETE or TRUNCATE for
row-exclusive; UPDATE, DELETE or TRUNCATE for the other modes, by
PostgreSQL's version).

Exit codes: 0 the lock was taken (and released at once); 3 it was not taken
within --lock-timeout (the blockers are listed and named); 1 the server cannot
be reached, the login fails, a table does not exist or a privilege is missing;
2 bad flags.`,
		Example: `  # would ALTER TABLE orders get its lock now?
  shardctl migrate locks --dsn postgres://app@db:5432/shop --table orders

  # two tables, the lock CREATE INDEX CONCURRENTLY takes, as JSON
  PGPASSWORD=… shardctl migrate locks --dsn "host=db dbname=shop user=app" \
      --table orders,payments --mode share-update-exclusive -o json

  # in a pipeline: refuse the release while the tables are held
  SHARDCTL_MIGRATE_DSN=postgres://app@db/shop shardctl migrate locks --table orders || exit 1`,
		Args:              cobra.NoArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE:              cmdutil.RunOptions(o),
	}
	f := cmd.Flags()
	f.StringVar(&o.dsnFlag, "dsn", "", "PostgreSQL connection string, URL or key=value (env "+EnvMigrateDSN+", else libpq's PG* variables)")
	f.StringSliceVar(&o.tables, "table", nil, "tables the migration locks, comma-separated or repeated, schema-qualified or as the search_path finds them")
	f.StringVar(&o.mode, "mode", locks.AccessExclusive.Flag(), "lock mode the migration takes: "+strings.Join(locks.ModeFlags(), ", "))
	f.DurationVar(&o.lockTimeout, "lock-timeout", locks.DefaultLockTimeout, "the longest the attempt waits for the lock")
	_ = cmd.RegisterFlagCompletionFunc("mode", completions.Values(locks.ModeFlags()...))
	_ = cmd.RegisterFlagCompletionFunc("table", cobra.NoFileCompletions)
	_ = cmd.RegisterFlagCompletionFunc("dsn", cobra.NoFileCompletions)
	return cmd
}

func (o *MigrateLocksOptions) Complete(*cobra.Command, []string) (err error) {
	o.printer, err = o.g.Printer()
	return err
}

func (o *MigrateLocksOptions) Validate() error {
	var tables []string
	for _, t := range o.tables {
		if t = strings.TrimSpace(t); t != "" {
			tables = append(tables, t)
		}
	}
	if len(tables) == 0 {
		return errors.New("--table: name the tables the migration locks, e.g. --table orders,payments")
	}
	mode, err := locks.ParseMode(o.mode)
	if err != nil {
		return fmt.Errorf("--mode: %w", err)
	}
	if o.lockTimeout <= 0 {
		return fmt.Errorf("--lock-timeout %v: want it above 0, e.g. 2s", o.lockTimeout)
	}
	dsn, from := o.dsnFlag, "--dsn"
	if dsn == "" {
		dsn, from = o.g.Getenv(EnvMigrateDSN), "$"+EnvMigrateDSN
	}
	if dsn == "" {
		from = "the PG* environment variables"
	}
	d, err := locks.ParseDSN(dsn)
	if err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	o.check = locks.Check{DSN: d, Tables: tables, Mode: mode, LockTimeout: o.lockTimeout}
	return nil
}

func (o *MigrateLocksOptions) Run(ctx context.Context) error {
	rep, err := o.check.Run(ctx)
	if err != nil {
		return err
	}
	if len(rep.Sessions) > 0 || o.printer.Format.Machine() {
		if err := o.printer.Print(locksView{rep}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(o.g.Streams.ErrOut, "no other session holds or waits for a lock on %s\n", strings.Join(rep.Tables, ", "))
	}
	if !rep.Acquired {
		return cmdutil.Refused(errors.New(rep.Verdict()))
	}
	if !o.printer.Format.Machine() {
		fmt.Fprintln(o.g.Streams.ErrOut, o.printer.Colors.Good(rep.Verdict()))
	}
	return nil
}

// locksView is the preflight's report as a table of sessions; its JSON is
// the report's. With no session to list the table is left out: the
// verdict on stderr says all there is.
type locksView struct{ locks.Report }

func (v locksView) Header(wide bool) []string {
	h := []string{"PID", "USER", "APPLICATION", "STATE", "TABLE", "MODE", "GRANTED", "CONFLICTS", "AUTOVACUUM", "SINCE", "QUERY"}
	if wide {
		h = append(h, "XACT START", "QUERY START", "WAIT EVENT", "BACKEND")
	}
	return h
}

func (v locksView) Rows(wide bool, c output.Colors) [][]string {
	var rows [][]string
	for _, s := range v.Sessions {
		pid := strconv.Itoa(s.PID)
		if s.PID == 0 {
			pid = "prepared"
		}
		granted := "yes"
		if !s.Granted {
			granted = c.Warn("waiting")
		}
		conflicts := "no"
		switch {
		case s.Blocking:
			conflicts = c.Bad("BLOCKING")
		case s.Conflicts:
			conflicts = c.Warn("yes")
		}
		row := []string{pid, output.Dash(s.User), output.Dash(s.Application), output.Dash(s.State), s.Table, s.Mode, granted, conflicts,
			lockYesNo(s.Autovacuum), human.Seconds(s.AgeSeconds), output.Dash(s.ShortQuery())}
		if wide {
			wait := s.WaitEventType
			if s.WaitEvent != "" {
				wait += ":" + s.WaitEvent
			}
			row = append(row, lockTime(s.XactStart), lockTime(s.QueryStart), output.Dash(wait), output.Dash(s.BackendType))
		}
		rows = append(rows, row)
	}
	return rows
}

func lockYesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func lockTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
