// Package serve holds the commands that run a runtime in the foreground:
// `proxy serve`, `registry serve`, `sim serve` and `demo`, with what they
// share (listen flags, log flags, TLS files, the graceful stop on a
// signal or a failure). The runtimes live under internal/. Besides cmdutil
// and output it imports observe, for the demo's dashboard.
package serve
