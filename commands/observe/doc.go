// Package observe holds the commands that show the signals: `signals`
// (once, or with --watch) and `top` (the live dashboard), and the flags
// that choose where the signals come from. The model is internal/signals,
// the readers internal/source, the screens tui/. It imports no other
// command package but cmdutil and output.
package observe
