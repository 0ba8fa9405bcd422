// Package cutover holds the commands that move clients and work between
// pools: `cutover plan|apply|status|promote|rollback` and the database
// migration's lock preflight, `migrate`. They parse flags and print; the
// plans, gates and runners live in migrate/. It imports no other command
// package but cmdutil and output.
package cutover
