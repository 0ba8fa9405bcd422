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
durations=${XDG_CACHE_HOME:-$HOME/.cache}/shardctl/test-durations-$tier

# Debian packages the tests use, one per line, with the reason.
DEBIAN_PACKAGES=(
  bash-completion   # completion is tested by completing words in a real bash
  prometheus        # signals are read from a real Prometheus server
  postgresql        # the migration lock preflight is tested against a real PostgreSQL (binaries in /usr/lib/postgresql/N/bin)
  protobuf-compiler # lint regenerates internal/gatewaypb from gateway.proto and compares
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
    saved=("$bindir"/*.saved)
    if [[ -e ${saved[0]} ]]; then
      mkdir -p "$(dirname "$durations")"
      "$bindir/testreport" -summary -durations "$durations" "${saved[@]}" || true
    fi
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

# The test binaries are built once (go test -c), outside every test's
# clock, and run here as go test runs them: in their package's folder,
# one package a core at a time, through test2json. (go test would link
# each binary a second time; the grpc rerun reuses the proxy's.) Their
# events go through testreport: what plain go test prints on the way,
# saved for the tables at the end.
bindir=$(mktemp -d)
testbins=$bindir/tests
go build -o "$bindir/testreport" ./scripts/testreport
build_tests() { # GO-TEST-FLAGS... PACKAGES...
  go test -race -vet=off -c -o "$testbins/" "$@" >/dev/null
}
run_package() { # LABEL IMPORT-PATH DIR [RUN-REGEXP]
  local label=$1 ip=$2 dir=$3 run=${4:-} out code=0
  out=$bindir/$(echo "run $label $ip" | tr '/ =' '___').json
  (cd "$dir" && exec go tool test2json -t -p "$ip" "$testbins/${ip##*/}.test" \
    -test.v=test2json -test.count=1 -test.timeout=30m ${run:+"-test.run=$run"}) >"$out" 2>&1 || code=$?
  "$bindir/testreport" -label "$label" -save "$out.saved" <"$out" >"$out.shown"
  # One package's output at a time, as go test shows it.
  flock "$bindir/report.lock" cat "$out.shown"
  echo "$code" >"$out.code"
}
run_tests() { # LABEL, then "IMPORT-PATH DIR [RUN-REGEXP]" lines on stdin
  local label=$1 ip dir run f
  while read -r ip dir run; do
    while (($(jobs -rp | wc -l) >= $(nproc))); do wait -n || true; done
    run_package "$label" "$ip" "$dir" "$run" &
  done
  wait
  for f in "$bindir"/run_*.json.code; do
    [[ $(cat "$f") == 0 ]] || return 1
  done
}
with_tests() { # PACKAGES...: "IMPORT-PATH DIR" of those that have tests
  go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}} {{.Dir}}{{end}}' "$@"
}
# Each package's wall time in this machine's last run of the tier (kept
# in $durations): the slowest start first, so none is left to run alone
# at the end.
slowest_first() { # reorders "IMPORT-PATH ..." lines; new packages first
  [[ -s $durations ]] || { cat; return; }
  awk 'NR == FNR { t[$1] = $2; next } { print (($1 in t) ? t[$1] : 1e9), $0 }' "$durations" - |
    sort -s -k1,1gr | cut -d' ' -f2-
}

# The long tier's tests: those in files under the `long` build tag,
# found by their files so nothing keeps a second list of them.
long_tests() { # prints "IMPORT-PATH DIR RUN-REGEXP" lines
  local f
  for f in $(grep -rl --include='*_test.go' '^//go:build long$' . | sort); do
    sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing\.T).*/\1/p' "$f" | sed "s|^|$(dirname "$f") |"
  done | awk '{ names[$1] = names[$1] (names[$1] ? "|" : "") $2 } END { for (d in names) print d, "^(" names[d] ")$" }' |
    while read -r d run; do echo "$(go list -f '{{.ImportPath}} {{.Dir}}' "$d") $run"; done | sort
}

if [[ $tier == long ]]; then
  phase build "shardctl and the long tier's test binaries, with -race"
  go build -o "$bindir/shardctl" ./cmd/shardctl
  export SHARDCTL_TEST_BINARY=$bindir/shardctl
  long=$(long_tests | slowest_first)
  build_tests -tags long $(cut -d' ' -f2 <<<"$long")
  phase test "the long scenarios, slowest package first"
  sed 's/^/  /' <<<"$long"
  run_tests "" <<<"$long"
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
# The generated gateway API must be what gen.sh makes of gateway.proto.
gen=$(mktemp -d)
internal/gatewaypb/gen.sh "$gen"
if ! diff -q "$gen/gateway.pb.go" internal/gatewaypb/gateway.pb.go >/dev/null || ! diff -q "$gen/gateway_grpc.pb.go" internal/gatewaypb/gateway_grpc.pb.go >/dev/null; then
  echo "internal/gatewaypb is stale: run internal/gatewaypb/gen.sh" >&2
  rm -rf "$gen"
  exit 1
fi
rm -rf "$gen"

# Compiling every package with -race is most of a cold run; done here, no
# test's clock runs while the compiler holds the cores. The integration
# tests run this shardctl binary instead of building their own.
phase build "shardctl and every test binary, with -race"
go build -o "$bindir/shardctl" ./cmd/shardctl
export SHARDCTL_TEST_BINARY=$bindir/shardctl
build_tests ./...

phase test "every package's tests but the long ones, with -race"
with_tests ./... | slowest_first | run_tests ""

# The proxy's grpc-go front stays an operator's fallback (--front=grpc):
# the tests of what a front does run again on it (the list is
# frontTests, in internal/proxy/main_test.go).
phase grpc "internal/proxy's front tests again, with --front=grpc"
with_tests ./internal/proxy | SHARDCTL_TEST_FRONT=grpc run_tests front=grpc
