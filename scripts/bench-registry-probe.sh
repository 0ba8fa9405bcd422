#!/usr/bin/env bash
# Runs `shardctl probe registry` (the published method, 20 s a phase)
# against a registry with the memory store on a free local port, and stops
# the registry whatever happens.
set -euo pipefail
bin=${1:-bin/shardctl}
log=$(mktemp)
"$bin" registry serve --listen 127.0.0.1:0 2>"$log" &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 100); do
	addr=$(sed -n 's/^listening on //p' "$log")
	[ -n "$addr" ] && break
	sleep 0.1
done
[ -n "$addr" ] || { echo "the registry did not start:" >&2; cat "$log" >&2; exit 1; }
"$bin" probe registry --registry "http://$addr/eureka" --duration 20s --burst 100000 --instances 500 -o wide
