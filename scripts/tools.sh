#!/usr/bin/env bash
# Prints the path of a pinned Go tool, building it once with `go install`
# into a cache outside the work tree, so CI runs and sessions on the same
# machine reuse it. Versions are pinned here and nowhere else.
#   scripts/tools.sh staticcheck|goreleaser|zbctl|h2spec|protoc-gen-go|protoc-gen-go-grpc
#   scripts/tools.sh kube-testenv   (a folder holding kube-apiserver and etcd)
set -euo pipefail

cache=${SHARDCTL_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/shardctl/tools}

# A real kube-apiserver and the etcd it pins, for the Kubernetes tests:
# built from the nested module scripts/kube-testenv (kubernetes cannot be
# `go install`ed: its go.mod replaces its staging modules with paths), and
# cached by a hash of that module and the Go version, so a warm machine
# pays seconds and a cold one minutes, once.
if [[ ${1:-} == kube-testenv ]]; then
  src="$(cd "$(dirname "${BASH_SOURCE[0]}")/kube-testenv" && pwd)"
  hash=$( (cd "$src" && cat go.mod go.sum tools.go etcd/main.go && go env GOVERSION) | sha256sum | cut -c1-16)
  dir="$cache/kube-testenv-$hash"
  if [[ ! -x $dir/kube-apiserver || ! -x $dir/etcd ]]; then
    echo "building kube-apiserver and etcd into $dir (once per machine; minutes when cold)" >&2
    # A folder of this build's own: another run building at the same
    # time (a test beside CI) must not move or remove it under us.
    mkdir -p "$cache"
    tmp=$(mktemp -d "$dir.tmp.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    version=k8s.io/component-base/version
    ver=$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$src/go.mod") # vMAJOR.MINOR.PATCH
    minor=${ver#v*.} minor=${minor%%.*}
    (cd "$src" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath \
      -ldflags "-s -w -X $version.gitVersion=$ver -X $version.gitMajor=1 -X $version.gitMinor=$minor" \
      -o "$tmp/" k8s.io/kubernetes/cmd/kube-apiserver ./etcd) >&2
    # The first build to finish wins; a later one leaves it in place.
    if [[ ! -x $dir/kube-apiserver || ! -x $dir/etcd ]]; then
      rm -rf "$dir" && mv -T "$tmp" "$dir" || [[ -x $dir/kube-apiserver && -x $dir/etcd ]]
    fi
  fi
  echo "$dir"
  exit 0
fi

declare -A TOOLS=(
  [staticcheck]="honnef.co/go/tools/cmd/staticcheck@v0.8.2"
  [goreleaser]="github.com/goreleaser/goreleaser/v2@v2.15.1"
  [zbctl]="github.com/camunda/zeebe/clients/go/v8/cmd/zbctl@v8.5.20"
  [h2spec]="github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible"
  # protoc's plugins for internal/gatewaypb: protoc-gen-go at go.mod's
  # google.golang.org/protobuf, so that the generated code and the runtime agree.
  [protoc-gen-go]="google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12"
  [protoc-gen-go-grpc]="google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2"
)

name=${1:?usage: scripts/tools.sh staticcheck|goreleaser|zbctl|h2spec|protoc-gen-go|protoc-gen-go-grpc|kube-testenv}
spec=${TOOLS[$name]:-}
if [[ -z $spec ]]; then
  echo "scripts/tools.sh: unknown tool '$name' (known: ${!TOOLS[*]})" >&2
  exit 2
fi
dir="$cache/$name-${spec##*@}"
bin="$dir/$name"
if [[ ! -x $bin ]]; then
  echo "building $spec into $dir (once per machine)" >&2
  mkdir -p "$dir"
  # Built outside the module so the project's go.mod does not pin its deps.
  (cd "$dir" && GOBIN="$dir" GOFLAGS=-buildvcs=false go install "$spec") >&2
fi
echo "$bin"
