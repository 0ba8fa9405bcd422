// Package migrate is the Blue-Green cutover: plans, gates measured on the
// signals, the runner that moves clients and new work from one pool of
// shards to another step by step (with pause, promote, rollback and
// resume), and its record in the registry. migrate/drain empties shards,
// migrate/kube does the cutover in Kubernetes, migrate/locks is the
// database-migration lock preflight. It knows nothing of cobra: it
// reports what it does through callbacks, and commands/ turns the events
// into lines, progress bars or JSON.
// It links no runtime: it reads the proxy and the registry through their
// api packages (internal/architecture checks).
package migrate
