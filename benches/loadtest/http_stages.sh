#!/usr/bin/env bash
# Where a turn's wall time goes over HTTP: the harness of `http_turns.sh` (wrk driving
# POST /v1/chat/completions over 1,000 sessions, nginx as an instant OpenAI-compatible model),
# with the server's own phase timers read from /metrics before and after each 10 s run
# (`turnstile_turn_phase_seconds`: queue wait from admission to the turn's start, context
# assembly, the model call, persist = the grouped commit, its flush and the wait for them;
# `turnstile_turn_seconds`: the turn, from its start to its reply published). Means over the
# run, in µs. "Before the turn and after it" is wrk's mean latency minus the queue wait and the
# turn: the HTTP exchange on loopback, the request's parse, the admission on the supervisor and
# the wait for it, and the reply's way back to the request and out. The queue wait is read on a
# millisecond clock, so it is only right as a mean over many turns. Three runs per connection
# count; prints each run and the median (min–max) of every column.
# Usage: benches/loadtest/http_stages.sh [BINARY] [CONNECTIONS...]
#        (default: target/release/turnstile, 16); env DURABILITY (strict), SESSIONS (1000)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(realpath "${1:-target/release/turnstile}")
shift || true
conns=("$@")
[ ${#conns[@]} -gt 0 ] || conns=(16)
durability=${DURABILITY:-strict}

. "$here/http/harness.sh"
need_wrk_and_nginx

start_single_server_harness "$durability"

# The phase sums and counts the running server has recorded so far.
phase_totals() {
    curl -s "http://127.0.0.1:$port/metrics" |
        grep -E '^turnstile_turn_(phase_)?seconds_(sum|count)' || true
}

echo "| connections | durability | turns/s | wrk mean | wrk p50 | before and after the turn | queue wait | assembly | model call | persist (commit + flush) | turn |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for c in "${conns[@]}"; do
    rows=()
    for run in 1 2 3; do
        start_turnstile "$bin" "$c"
        phase_totals >"$work/before.txt"
        out=$(drive_chat "$c" 10s)
        phase_totals >"$work/after.txt"
        stop_turnstile
        row=$(python3 -c '
import json, re, sys
r = json.loads(sys.argv[1])
def totals(path):
    t = {}
    for line in open(path):
        m = re.match(r"turnstile_turn_(phase_)?seconds_(sum|count)(?:\{phase=\"(\w+)\"\})? (\S+)", line)
        if m:
            t[(m.group(3) or "turn", m.group(2))] = float(m.group(4))
    return t
a, b = totals(sys.argv[2]), totals(sys.argv[3])
def mean_us(phase):
    n = b[(phase, "count")] - a.get((phase, "count"), 0)
    return (b[(phase, "sum")] - a.get((phase, "sum"), 0)) / max(n, 1) * 1e6
ok = r["requests"] - r["non2xx"]
wrk_mean = r["mean_ms"] * 1000
turn = mean_us("turn")
print("%.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f" % (ok / r["seconds"], wrk_mean,
    r["p50_ms"] * 1000, wrk_mean - mean_us("queue_wait") - turn, mean_us("queue_wait"), mean_us("assembly"),
    mean_us("model"), mean_us("persist"), turn))' \
            "$(grep '^JSON ' <<<"$out" | sed 's/^JSON //')" "$work/before.txt" "$work/after.txt")
        echo "c=$c run $run: turns/s wrk_mean wrk_p50 before/after queue assembly model persist turn (µs) = $row" >&2
        rows+=("$row")
    done
    printf '%s\n' "${rows[@]}" | median_row "$c" "$durability" -- %.0f %.0f:µs %.0f:µs %.0f:µs %.0f:µs %.0f:µs %.0f:µs %.0f:µs %.0f:µs
done
