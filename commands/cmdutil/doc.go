// Package cmdutil is what every shardctl command shares, as kubectl's
// cmd/util is: the global flags and environment (Globals), the
// Complete/Validate/Run shape (Options), exit codes and the errors that
// carry them, the registry flags of the commands that read or write
// shards, and the help groups. It imports no command package, and no
// runtime beyond the registry's client.
package cmdutil
