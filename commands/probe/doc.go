// Package probe holds `probe` and its subcommands: what the proxies see,
// health checks of shards, and the capacity probe. The probes themselves
// live in probes/. It imports no other command package but cmdutil and
// output.
package probe
