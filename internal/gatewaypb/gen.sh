#!/usr/bin/env bash
# Generates gateway.pb.go and gateway_grpc.pb.go from gateway.proto into
# OUT (default: this folder), with protoc (Debian's protobuf-compiler)
# and the plugins pinned in scripts/tools.sh. The proto's package is
# renamed (shardctl.gateway) so that these types and the Zeebe Go
# client's register side by side; the service keeps the gateway's wire
# name, gateway_protocol.Gateway, which is what a client dials.
#   internal/gatewaypb/gen.sh [OUT]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$here/../.."
out="${1:-$here}"
"$root/scripts/install-debs.sh" protobuf-compiler
gen_go="$("$root/scripts/tools.sh" protoc-gen-go)"
gen_grpc="$("$root/scripts/tools.sh" protoc-gen-go-grpc)"
# Compiled as gatewaypb/gateway.proto: the Go client registers its file
# as gateway.proto, and two files of one path cannot be registered.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
protoc --proto_path="$here/.." \
  --plugin=protoc-gen-go="$gen_go" --plugin=protoc-gen-go-grpc="$gen_grpc" \
  --go_out="$tmp" --go_opt=paths=source_relative \
  --go-grpc_out="$tmp" --go-grpc_opt=paths=source_relative \
  gatewaypb/gateway.proto
mkdir -p "$out"
mv "$tmp"/gatewaypb/gateway.pb.go "$tmp"/gatewaypb/gateway_grpc.pb.go "$out/"
# The gRPC method paths and service name a Zeebe gateway answers to.
sed -i 's|"/shardctl\.gateway\.Gateway/|"/gateway_protocol.Gateway/|; s|ServiceName: "shardctl\.gateway\.Gateway"|ServiceName: "gateway_protocol.Gateway"|' \
  "$out/gateway_grpc.pb.go"
if grep -q 'shardctl\.gateway\.Gateway' "$out/gateway_grpc.pb.go"; then
  echo "gen.sh: a service name was left unrenamed in gateway_grpc.pb.go" >&2
  exit 1
fi
gofmt -w "$out/gateway.pb.go" "$out/gateway_grpc.pb.go"
