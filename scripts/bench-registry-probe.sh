#!/usr/bin/env bash
# Runs `shardctl probe registry` (the published method, 20 s a phase)
# against a registry with the memory store, then against three replicas
# over an embedded three-member etcd cluster (the probe talks to replica
# a), and prints the second beside the first with the ratio. Everything
# listens on free 127.0.0.1 ports and is stopped whatever happens.
set -euo pipefail
bin=${1:-bin/shardctl}
duration=${DURATION:-20s}
work=$(mktemp -d)
pids=()
stop() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
trap 'stop; rm -rf "$work"' EXIT

# free_port sets port to a TCP port nothing on this machine listens on
# (etcd's peers must be named before they start, so :0 does not do).
used=" "
free_port() {
	local hex
	while :; do
		port=$((20000 + RANDOM % 20000))
		hex=$(printf ':%04X ' "$port")
		if ! grep -q "$hex" /proc/net/tcp /proc/net/tcp6 2>/dev/null && [[ "$used" != *" $port "* ]]; then
			used="$used$port "
			return
		fi
	done
}

# serve starts `shardctl registry serve ARGS` and sets addr to its address.
serve() {
	local log
	log="$work/serve-${#pids[@]}.log"
	addr=""
	# Self-preservation off: the probe's last phase times a lease's
	# expiry, and after a minute of fetches with no renewals a registry
	# that preserves itself holds eviction (as Eureka would).
	"$bin" registry serve --listen 127.0.0.1:0 --self-preservation=false "$@" 2>"$log" &
	pids+=($!)
	for _ in $(seq 100); do
		addr=$(sed -n 's/^listening on //p' "$log")
		[ -n "$addr" ] && return
		sleep 0.1
	done
	echo "the registry did not start:" >&2
	cat "$log" >&2
	exit 1
}

# ready says whether a registry answers /readyz with 200, without curl.
ready() {
	local reply
	exec 3<>"/dev/tcp/${1%:*}/${1##*:}" || return 1
	printf 'GET /readyz HTTP/1.0\r\n\r\n' >&3
	read -r reply <&3 || true
	exec 3<&-
	[[ "$reply" == *" 200 "* ]]
}

probe=("$bin" probe registry --duration "$duration" --burst 100000 --instances 500)

echo "== memory store"
serve
"${probe[@]}" --registry "http://$addr/eureka" -o json >"$work/memory.json"
stop

echo "== three replicas over embedded etcd"
cluster=""
for id in a b c; do
	free_port
	cluster="$cluster${cluster:+,}$id=http://127.0.0.1:$port"
done
declare -A addrs
for id in a b c; do
	free_port
	serve --id "$id" --embedded-etcd "$work/etcd-$id" --initial-cluster "$cluster" --etcd-client-url "http://127.0.0.1:$port"
	addrs[$id]=$addr
done
for _ in $(seq 300); do
	n=0
	for id in a b c; do
		if ready "${addrs[$id]}"; then n=$((n + 1)); fi
	done
	[ "$n" = 3 ] && break
	sleep 0.1
done
[ "$n" = 3 ] || { echo "the replicas did not get ready" >&2; exit 1; }
"${probe[@]}" --registry "http://${addrs[a]}/eureka" --baseline "$work/memory.json" -o wide
