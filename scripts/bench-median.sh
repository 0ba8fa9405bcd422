#!/usr/bin/env bash
# Reads `go test -bench -count N` output on stdin, passes it through, and
# ends with the median of ns/op and of every rate (x/s) per benchmark: these
# machines are noisy, so one run proves little.
set -euo pipefail
# Passed through by awk itself: a tee to /dev/stderr would open the file
# anew when stderr is one (make … >log 2>&1), and cut what came before.
awk '
  { print; fflush() }
  /^Benchmark/ {
    name = $1; sub(/-[0-9]+$/, "", name)
    for (i = 3; i < NF; i++) if ($(i+1) ~ /\/s$/ || $(i+1) == "ns/op") { key = name " " $(i+1); vals[key] = vals[key] " " $i }
  }
  END {
    print ""
    for (k in vals) {
      n = split(substr(vals[k], 2), a, " ")
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
      m = (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
      printf "median of %d runs: %s = %.0f\n", n, k, m
    }
  }' 2>/dev/null
