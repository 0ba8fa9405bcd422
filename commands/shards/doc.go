// Package shards holds the commands that read and change the registry's
// shards: `shards list|get|register|deregister|…` and `drain`/`undrain`.
// The drain's waiting is migrate's. It imports no other command package
// but cmdutil and output.
package shards
