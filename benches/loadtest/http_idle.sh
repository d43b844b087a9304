#!/usr/bin/env bash
# How busy the machine is during the full turn over HTTP: the harness of `http_turns.sh`
# (wrk driving POST /v1/chat/completions over 1,000 sessions, nginx as an instant model), with
# `vmstat 1` sampling the whole machine (server, wrk and nginx share its two cores) through 8 s
# of a 10 s run. Three runs per connection count; prints each run and the median (min–max) of
# turns/s, p50, and the machine's idle and iowait percentages (first sample dropped: vmstat's
# first line averages since boot). Idle time at a connection count means the turns are waiting
# (on the strict flush, on wake-ups), not queueing for CPU.
# Usage: benches/loadtest/http_idle.sh [BINARY] [CONNECTIONS...]
#        (default: target/release/turnstile, 16 64); env DURABILITY (strict), SESSIONS (1000)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(realpath "${1:-target/release/turnstile}")
shift || true
conns=("$@")
[ ${#conns[@]} -gt 0 ] || conns=(16 64)
durability=${DURABILITY:-strict}
command -v vmstat >/dev/null || { echo "vmstat is needed (procps)" >&2; exit 1; }

. "$here/http/harness.sh"
need_wrk_and_nginx

start_single_server_harness "$durability"

for c in "${conns[@]}"; do
    rows=()
    for run in 1 2 3; do
        start_turnstile "$bin" "$c"
        vmstat 1 9 >"$work/vmstat.txt" &
        vm=$!
        out=$(drive_chat "$c" 10s)
        wait "$vm"
        stop_turnstile
        row=$(python3 -c '
import json, statistics as st, sys
r = json.loads(sys.argv[1])
lines = [l.split() for l in open(sys.argv[2]) if l.split() and l.split()[0].isdigit()][1:]
head = "r b swpd free buff cache si so bi bo in cs us sy id wa st".split()
col = lambda name: [float(l[head.index(name)]) for l in lines]
ok = r["requests"] - r["non2xx"]
print("%.0f %.2f %.0f %.0f" % (ok / r["seconds"], r["p50_ms"], st.median(col("id")), st.median(col("wa"))))' \
            "$(grep '^JSON ' <<<"$out" | sed 's/^JSON //')" "$work/vmstat.txt")
        echo "c=$c run $run: turns/s p50_ms idle_% iowait_% = $row"
        rows+=("$row")
    done
    printf '%s\n' "${rows[@]}" | median_row "$c" "$durability" -- %.0f %.2f:ms %.0f:% %.0f:%
done
