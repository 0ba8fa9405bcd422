#!/usr/bin/env bash
# CPU of `shardctl top` watching 16 simulated shards at a 2 s refresh, on a
# 200x50 terminal (tmux), as a share of one core; scraping the shards
# directly (the heavier source: top parses 16 /metrics pages a second).
#   scripts/bench-top.sh [SECONDS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs=${1:-60}
scripts/install-debs.sh tmux
dir=$(mktemp -d)
session=shardctl-bench-top-$$
pids=()
cleanup() {
  tmux kill-session -t "$session" 2>/dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
go build -o "$dir/shardctl" ./cmd/shardctl
go build -o "$dir/loadgen" ./internal/load/cmd/loadgen
args=()
for i in $(seq -w 1 16); do
  "$dir/shardctl" sim serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --partitions 1 --capacity 300 \
    2>"$dir/sim-$i.err" &
  pids+=($!)
done
sleep 1
for i in $(seq -w 1 16); do
  gw=$(sed -n 's/^listening on //p' "$dir/sim-$i.err")
  metrics=$(sed -n 's|^metrics on ||p' "$dir/sim-$i.err")
  args+=(--scrape "shard-$i=$metrics")
  "$dir/loadgen" --addr "$gw" --rate 20 >/dev/null 2>&1 &
  pids+=($!)
done
tmux new-session -d -s "$session" -x 200 -y 50 "$dir/shardctl top --refresh 2s --window 5m ${args[*]}"
sleep 10 # warm up: the first scrapes and frames
pid=$(pgrep -f "^$dir/shardctl top" | head -1)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
t0=$(ticks "$pid")
sleep "$secs"
t1=$(ticks "$pid")
tmux capture-pane -t "$session" -p | head -8
awk -v a="$t0" -v b="$t1" -v hz="$hz" -v s="$secs" \
  'BEGIN { printf "\nshardctl top, 16 shards scraped, refresh 2s, 200x50: %.2f%% of a core over %ds (target <= 3%%)\n", (b - a) / hz / s * 100, s }'
