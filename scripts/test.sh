#!/usr/bin/env bash
# The project's one test command (README, .ci/run): installs what the suite
# needs when it is missing, then gofmt, go vet, staticcheck, goreleaser
# check and the whole test suite with the race detector.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# CI starts with a bare environment: make sure go and its caches resolve.
[[ -n ${HOME:-} ]] || export HOME=$(getent passwd "$(id -u)" | cut -d: -f6)
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"

# Debian packages the tests use, one per line, with the reason.
DEBIAN_PACKAGES=(
  bash-completion   # completion is tested by completing words in a real bash
  prometheus        # signals are read from a real Prometheus server
)

step() { printf '\n==> %s\n' "$*"; }

scripts/install-debs.sh "${DEBIAN_PACKAGES[@]}"
# The registry is tested with the npm Eureka client run by node. Debian's
# nodejs and npm only when there is no node already: a NodeSource node
# carries its own npm, and Debian's npm would conflict with it.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  scripts/install-debs.sh nodejs npm
fi
staticcheck=$(scripts/tools.sh staticcheck)
goreleaser=$(scripts/tools.sh goreleaser)
# The simulator is tested with the real zbctl as well as the Go client.
ZBCTL=$(scripts/tools.sh zbctl)
export ZBCTL

step "gofmt -l"
unformatted=$(gofmt -l .)
if [[ -n $unformatted ]]; then
  echo "these files need gofmt -w:" >&2
  echo "$unformatted" >&2
  exit 1
fi

step "go vet"
go vet ./...

step "staticcheck"
"$staticcheck" ./...

step "goreleaser check"
"$goreleaser" check --config goreleaser.yaml

step "go test -race"
go test -race -count=1 -timeout 30m ./...
