#!/usr/bin/env bash
# Prints the path of a pinned Go tool, building it once with `go install`
# into a cache outside the work tree, so CI runs and sessions on the same
# machine reuse it. Versions are pinned here and nowhere else.
#   scripts/tools.sh staticcheck|goreleaser|zbctl
set -euo pipefail

declare -A TOOLS=(
  [staticcheck]="honnef.co/go/tools/cmd/staticcheck@v0.8.2"
  [goreleaser]="github.com/goreleaser/goreleaser/v2@v2.15.1"
  [zbctl]="github.com/camunda/zeebe/clients/go/v8/cmd/zbctl@v8.5.20"
)

name=${1:?usage: scripts/tools.sh staticcheck|goreleaser|zbctl}
spec=${TOOLS[$name]:-}
if [[ -z $spec ]]; then
  echo "scripts/tools.sh: unknown tool '$name' (known: ${!TOOLS[*]})" >&2
  exit 2
fi
cache=${SHARDCTL_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/shardctl/tools}
dir="$cache/$name-${spec##*@}"
bin="$dir/$name"
if [[ ! -x $bin ]]; then
  echo "building $spec into $dir (once per machine)" >&2
  mkdir -p "$dir"
  # Built outside the module so the project's go.mod does not pin its deps.
  (cd "$dir" && GOBIN="$dir" GOFLAGS=-buildvcs=false go install "$spec") >&2
fi
echo "$bin"
