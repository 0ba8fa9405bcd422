package locks

import (
	"fmt"
	"strings"
)

// Mode is one of PostgreSQL's eight table lock modes, weakest first.
type Mode int

// The table lock modes, in the order of PostgreSQL's documentation.
const (
	AccessShare Mode = iota + 1
	RowShare
	RowExclusive
	ShareUpdateExclusive
	Share
	ShareRowExclusive
	Exclusive
	AccessExclusive
)

// lockModeNames are each mode's spellings: the flag value, the words of
// LOCK TABLE … IN … MODE, and pg_locks.mode.
var lockModeNames = map[Mode]struct{ flag, sql, pgLocks string }{
	AccessShare:          {"access-share", "ACCESS SHARE", "AccessShareLock"},
	RowShare:             {"row-share", "ROW SHARE", "RowShareLock"},
	RowExclusive:         {"row-exclusive", "ROW EXCLUSIVE", "RowExclusiveLock"},
	ShareUpdateExclusive: {"share-update-exclusive", "SHARE UPDATE EXCLUSIVE", "ShareUpdateExclusiveLock"},
	Share:                {"share", "SHARE", "ShareLock"},
	ShareRowExclusive:    {"share-row-exclusive", "SHARE ROW EXCLUSIVE", "ShareRowExclusiveLock"},
	Exclusive:            {"exclusive", "EXCLUSIVE", "ExclusiveLock"},
	AccessExclusive:      {"access-exclusive", "ACCESS EXCLUSIVE", "AccessExclusiveLock"},
}

// lockConflicts is the table "Conflicting Lock Modes" of PostgreSQL's
// documentation (13.3.1, Table-Level Locks), unchanged since 8.x: which
// modes each mode cannot be granted beside. The lock manager applies it
// to held and queued requests alike, so a migration waits behind both.
var lockConflicts = map[Mode][]Mode{
	AccessShare:          {AccessExclusive},
	RowShare:             {Exclusive, AccessExclusive},
	RowExclusive:         {Share, ShareRowExclusive, Exclusive, AccessExclusive},
	ShareUpdateExclusive: {ShareUpdateExclusive, Share, ShareRowExclusive, Exclusive, AccessExclusive},
	Share:                {RowExclusive, ShareUpdateExclusive, ShareRowExclusive, Exclusive, AccessExclusive},
	ShareRowExclusive:    {RowExclusive, ShareUpdateExclusive, Share, ShareRowExclusive, Exclusive, AccessExclusive},
	Exclusive:            {RowShare, RowExclusive, ShareUpdateExclusive, Share, ShareRowExclusive, Exclusive, AccessExclusive},
	AccessExclusive:      {AccessShare, RowShare, RowExclusive, ShareUpdateExclusive, Share, ShareRowExclusive, Exclusive, AccessExclusive},
}

// Modes are every mode, weakest first.
func Modes() []Mode {
	return []Mode{AccessShare, RowShare, RowExclusive, ShareUpdateExclusive, Share, ShareRowExclusive, Exclusive, AccessExclusive}
}

// ModeFlags are the --mode values, weakest first.
func ModeFlags() []string {
	var out []string
	for _, m := range Modes() {
		out = append(out, m.Flag())
	}
	return out
}

// ParseMode reads a mode as the flag spells it (access-exclusive),
// as SQL does (ACCESS EXCLUSIVE) or as pg_locks does
// (AccessExclusiveLock).
func ParseMode(s string) (Mode, error) {
	norm := func(s string) string {
		s = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(s), "Lock"))
		return strings.NewReplacer("-", "", "_", "", " ", "").Replace(s)
	}
	for m, n := range lockModeNames {
		if norm(s) == norm(n.flag) {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unknown lock mode %q: use one of %s", s, strings.Join(ModeFlags(), ", "))
}

// modeOfPgLocks reads pg_locks.mode; false for the modes that are not
// table lock modes (SIReadLock, the predicate locks of serializable
// transactions, which block no one).
func modeOfPgLocks(s string) (Mode, bool) {
	for m, n := range lockModeNames {
		if n.pgLocks == s {
			return m, true
		}
	}
	return 0, false
}

// String is the mode as SQL writes it: ACCESS EXCLUSIVE.
func (m Mode) String() string {
	if n, ok := lockModeNames[m]; ok {
		return n.sql
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Flag is the mode as --mode takes it: access-exclusive.
func (m Mode) Flag() string { return lockModeNames[m].flag }

// ConflictsWith reports whether a request for m must wait for a session
// that holds, or waits ahead for, o.
func (m Mode) ConflictsWith(o Mode) bool {
	for _, c := range lockConflicts[m] {
		if c == o {
			return true
		}
	}
	return false
}

// privileges are those of which a role needs one on a table to LOCK it
// in m, as LockTableAclCheck in PostgreSQL's lockcmds.c decides: before
// 16, SELECT for ACCESS SHARE, any write privilege for ROW EXCLUSIVE, and
// UPDATE, DELETE or TRUNCATE for the rest; from 16, those three allow
// every mode, SELECT also allows ACCESS SHARE and INSERT the modes up to
// ROW EXCLUSIVE; 17 adds MAINTAIN, which allows every mode.
func (m Mode) privileges(serverVersion int) []string {
	if serverVersion < 160000 {
		switch m {
		case AccessShare:
			return []string{"SELECT"}
		case RowExclusive:
			return []string{"INSERT", "UPDATE", "DELETE", "TRUNCATE"}
		}
		return []string{"UPDATE", "DELETE", "TRUNCATE"}
	}
	var out []string
	if m <= AccessShare {
		out = append(out, "SELECT")
	}
	if m <= RowExclusive {
		out = append(out, "INSERT")
	}
	out = append(out, "UPDATE", "DELETE", "TRUNCATE")
	if serverVersion >= 170000 {
		out = append(out, "MAINTAIN")
	}
	return out
}
