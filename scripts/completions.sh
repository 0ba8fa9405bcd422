#!/usr/bin/env bash
# Writes the shell completion scripts that release archives ship
# (goreleaser before-hook) into build/completions.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=build/completions
rm -rf "$out" && mkdir -p "$out"
go build -o build/shardctl-completions ./cmd/shardctl
for shell in bash zsh fish powershell; do
  ./build/shardctl-completions completion "$shell" > "$out/shardctl.$shell"
done
mv "$out/shardctl.powershell" "$out/shardctl.ps1"
mv "$out/shardctl.zsh" "$out/_shardctl"
rm -f build/shardctl-completions
