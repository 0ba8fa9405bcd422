// Package architecture holds no code: its test reads the module's import
// graph (go list) and fails on an arrow docs/architecture.md does not
// allow — a runtime that links a probe, the TUI importing more than the
// model, anything but main importing the commands. The rules live in the
// test beside the map's words; change both together.
package architecture
