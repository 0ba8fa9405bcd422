#!/usr/bin/env bash
# The project's test command, in two tiers (README, .ci/run runs both):
#   scripts/test.sh        the fast tier (make test): installs what the suite
#                          needs when it is missing, then gofmt, go vet,
#                          staticcheck, goreleaser check, compiles everything,
#                          and runs every test with the race detector, except
#                          the long scenarios.
#   scripts/test.sh long   the long tier (make test-long): the multi-minute
#                          load scenarios, the tests in files under the `long`
#                          build tag (*_long_test.go), and nothing else.
# At the end, pass or fail, it prints the 15 slowest tests, each package's
# wall time and how long each phase took.
set -euo pipefail
tier=${1:-fast}
[[ $tier == fast || $tier == long ]] || { echo "usage: scripts/test.sh [long]" >&2; exit 2; }
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
tool_times=()
phase() { # NAME DESCRIPTION
  phase_end
  phase_name=$1
  phase_start=$SECONDS
  printf '\n==> %s: %s\n' "$1" "$2"
}
phase_end() {
  [[ -z $phase_name ]] || phases+=("$(printf '%-8s %5ds' "$phase_name" $((SECONDS - phase_start)))")
  if [[ $phase_name == tools && ${#tool_times[@]} -gt 0 ]]; then
    phases[-1]+="  ($(IFS=,; echo "${tool_times[*]}" | sed 's/,/, /g'))"
  fi
  phase_name=""
}
finish() {
  local code=$?
  phase_end
  if [[ -n $bindir ]]; then
    saved=("$bindir"/run*.json)
    [[ ! -e ${saved[0]} ]] || "$bindir/testreport" -summary "${saved[@]}" || true
    rm -rf "$bindir"
  fi
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
# Each tool's time goes into the phase table: on a cold machine this phase
# is most of the run, and which tool costs what is the question asked.
tool() { # VARIABLE NAME: sets VARIABLE to the path of the tool NAME
  local start=$SECONDS path
  path=$(scripts/tools.sh "$2")
  printf -v "$1" '%s' "$path"
  tool_times+=("$2 $((SECONDS - start))s")
}
tool staticcheck staticcheck
tool goreleaser goreleaser
# The simulator is tested with the real zbctl as well as the Go client.
tool ZBCTL zbctl
export ZBCTL
# The proxy's frame front is checked for HTTP/2 conformance with h2spec.
tool H2SPEC h2spec
export H2SPEC
# The cutover in Kubernetes is tested against a real kube-apiserver and
# etcd, built from the Go module proxy: minutes on a cold machine, once.
tool SHARDCTL_KUBE_TESTENV kube-testenv
export SHARDCTL_KUBE_TESTENV

# go test's events go through testreport: what plain go test prints on the
# way, saved for the tables at the end.
bindir=$(mktemp -d)
go build -o "$bindir/testreport" ./scripts/testreport
runs=0
gotest() { # LABEL GO-TEST-ARGS... (LABEL names a rerun of packages, or is "")
  local label=$1
  shift
  runs=$((runs + 1))
  go test -json "$@" | "$bindir/testreport" -save "$bindir/run$runs.json" -label "$label"
}

# The long tier's tests: those in files under the `long` build tag,
# found by their files so nothing keeps a second list of them.
long_tests() { # prints "PACKAGE-DIR REGEXP" lines
  local f
  for f in $(grep -rl --include='*_test.go' '^//go:build long$' . | sort); do
    sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing\.T).*/\1/p' "$f" | sed "s|^|$(dirname "$f") |"
  done | awk '{ names[$1] = names[$1] (names[$1] ? "|" : "") $2 } END { for (d in names) print d, "^(" names[d] ")$" }' | sort
}

if [[ $tier == long ]]; then
  phase build "the long tier's test binaries, with -race"
  go build -o "$bindir/shardctl" ./cmd/shardctl
  export SHARDCTL_TEST_BINARY=$bindir/shardctl
  mapfile -t long < <(long_tests)
  pkgs=() names=()
  for l in "${long[@]}"; do pkgs+=("${l%% *}") names+=("${l#* }"); done
  run=$(IFS='|'; echo "${names[*]}")
  go test -tags long -race -vet=off -count=1 -run '^$' "${pkgs[@]}" >/dev/null
  phase test "the long scenarios, go test -race -tags long"
  printf '  %s\n' "${long[@]}"
  # Each package runs only its own long tests: -run takes every package's
  # names, so a name must not be a fast test's in another long package.
  gotest "" -tags long -race -vet=off -count=1 -timeout 40m -run "$run" "${pkgs[@]}"
  exit 0
fi

phase lint "gofmt -l, go vet, staticcheck, goreleaser check (both tiers)"
unformatted=$(gofmt -l .)
if [[ -n $unformatted ]]; then
  echo "these files need gofmt -w:" >&2
  echo "$unformatted" >&2
  exit 1
fi
go vet -tags long ./...
"$staticcheck" -tags long ./...
"$goreleaser" check --config goreleaser.yaml

# Compiling every package with -race is most of a cold run; done here, no
# test's clock runs while the compiler holds the cores. The integration
# tests run this shardctl binary instead of building their own.
phase build "shardctl and every test binary, with -race"
go build -o "$bindir/shardctl" ./cmd/shardctl
export SHARDCTL_TEST_BINARY=$bindir/shardctl
go test -race -vet=off -count=1 -run '^$' ./... >/dev/null

phase test "go test -race ./..., the fast tier"
gotest "" -race -vet=off -count=1 -timeout 30m ./...

# The proxy's grpc-go front stays an operator's fallback (--front=grpc):
# the tests of what a front does run again on it (the list is
# frontTests, in internal/proxy/main_test.go).
phase grpc "internal/proxy's front tests again, with --front=grpc"
SHARDCTL_TEST_FRONT=grpc gotest front=grpc -race -vet=off -count=1 -timeout 20m ./internal/proxy
