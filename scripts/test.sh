#!/usr/bin/env bash
# The project's one test command (README, .ci/run): installs what the suite
# needs when it is missing, then gofmt, go vet, staticcheck, goreleaser
# check, compiles everything, and runs the whole test suite with the race
# detector. At the end (pass or fail) it prints how long each phase took.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# CI starts with a bare environment: make sure go and its caches resolve.
[[ -n ${HOME:-} ]] || export HOME=$(getent passwd "$(id -u)" | cut -d: -f6)
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"

# Debian packages the tests use, one per line, with the reason.
DEBIAN_PACKAGES=(
  bash-completion   # completion is tested by completing words in a real bash
  prometheus        # signals are read from a real Prometheus server
  postgresql        # the migration lock preflight is tested against a real PostgreSQL (binaries in /usr/lib/postgresql/N/bin)
)

# Phases and their times, printed when the script ends however it ends.
phases=()
phase_name=""
phase_start=0
run_start=$SECONDS
bindir=""
phase() { # NAME DESCRIPTION
  phase_end
  phase_name=$1
  phase_start=$SECONDS
  printf '\n==> %s: %s\n' "$1" "$2"
}
phase_end() {
  [[ -z $phase_name ]] || phases+=("$(printf '%-8s %5ds' "$phase_name" $((SECONDS - phase_start)))")
  phase_name=""
}
finish() {
  local code=$?
  [[ -z $bindir ]] || rm -rf "$bindir"
  phase_end
  printf '\n==> phase times (%s)\n' "$([[ $code -eq 0 ]] && echo passed || echo "failed, exit $code")"
  printf '  %s\n' "${phases[@]}"
  printf '  %-8s %5ds\n' total $((SECONDS - run_start))
}
trap finish EXIT

phase install "Debian packages and node, when missing"
scripts/install-debs.sh "${DEBIAN_PACKAGES[@]}"
# The registry is tested with the npm Eureka client run by node. Debian's
# nodejs and npm only when there is no node already: a NodeSource node
# carries its own npm, and Debian's npm would conflict with it.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  scripts/install-debs.sh nodejs npm
fi
# `kubectl shard` is tested through a real kubectl. Debian's only when
# there is none: another kubectl package may own /usr/bin/kubectl already.
command -v kubectl >/dev/null || scripts/install-debs.sh kubernetes-client

phase tools "pinned Go tools, built once per machine"
staticcheck=$(scripts/tools.sh staticcheck)
goreleaser=$(scripts/tools.sh goreleaser)
# The simulator is tested with the real zbctl as well as the Go client.
ZBCTL=$(scripts/tools.sh zbctl)
export ZBCTL
# The proxy's frame front is checked for HTTP/2 conformance with h2spec.
H2SPEC=$(scripts/tools.sh h2spec)
export H2SPEC
# The cutover in Kubernetes is tested against a real kube-apiserver and
# etcd, built from the Go module proxy: minutes on a cold machine, once.
SHARDCTL_KUBE_TESTENV=$(scripts/tools.sh kube-testenv)
export SHARDCTL_KUBE_TESTENV

phase lint "gofmt -l, go vet, staticcheck, goreleaser check"
unformatted=$(gofmt -l .)
if [[ -n $unformatted ]]; then
  echo "these files need gofmt -w:" >&2
  echo "$unformatted" >&2
  exit 1
fi
go vet ./...
"$staticcheck" ./...
"$goreleaser" check --config goreleaser.yaml

# Compiling every package with -race is most of a cold run; done here, no
# test's clock runs while the compiler holds the cores. The integration
# tests run this shardctl binary instead of building their own.
phase build "shardctl and every test binary, with -race"
bindir=$(mktemp -d)
go build -o "$bindir/shardctl" ./cmd/shardctl
export SHARDCTL_TEST_BINARY=$bindir/shardctl
go test -race -vet=off -count=1 -run '^$' ./... >/dev/null

phase test "go test -race ./..."
go test -race -vet=off -count=1 -timeout 30m ./...

# The proxy's grpc-go front stays an operator's fallback (--front=grpc):
# its tests run again on it.
phase test-grpc-front "go test -race ./internal/proxy with --front=grpc"
SHARDCTL_TEST_FRONT=grpc go test -race -vet=off -count=1 -timeout 20m ./internal/proxy
