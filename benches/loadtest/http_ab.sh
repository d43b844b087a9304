#!/usr/bin/env bash
# Compares two builds on the HTTP turn (the `http_turns.sh` harness: wrk driving
# POST /v1/chat/completions over 1,000 sessions, nginx as an instant OpenAI-compatible model,
# strict durability), in interleaved runs: A, B, A, B, ... each on a fresh server. This
# machine's speed drifts by up to 2x from one minute to the next, so two builds measured a
# few minutes apart cannot be compared; a pair of runs seconds apart can. Prints every run,
# then the median (min–max) of turns/s and CPU per turn for each build, and the median of the
# per-pair ratios B/A.
# Usage: benches/loadtest/http_ab.sh BINARY_A BINARY_B [PAIRS] [SECONDS] [CONNECTIONS]
#        (default: 5 pairs of 6 s runs at 16 connections); env SESSIONS (1000), DURABILITY
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin_a=$(realpath "$1")
bin_b=$(realpath "$2")
pairs=${3:-5}
secs=${4:-6}
c=${5:-16}
durability=${DURABILITY:-strict}

. "$here/http/harness.sh"
need_wrk_and_nginx

start_single_server_harness "$durability"

# One run of binary $1: sets `ran` to "turns/s cpu_us_per_turn".
run() {
    measure_run "$1" "$c" "$secs"
    ran=$(awk '{print $1, $4}' <<<"$run_result")
}

rows=()
for p in $(seq "$pairs"); do
    run "$bin_a"
    a=$ran
    run "$bin_b"
    b=$ran
    echo "pair $p: A turns/s cpu_us = $a | B = $b"
    rows+=("$a $b")
done
printf '%s\n' "${rows[@]}" | python3 -c '
import sys, statistics as st
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
def m(v, fmt="%.0f"):
    return "%s (%s–%s)" % (fmt % st.median(v), fmt % min(v), fmt % max(v))
print("| build | turns/s | CPU/turn |")
print("|---|---|---|")
print("| A | %s | %s µs |" % (m([r[0] for r in rows]), m([r[1] for r in rows])))
print("| B | %s | %s µs |" % (m([r[2] for r in rows]), m([r[3] for r in rows])))
print("B/A per pair, median (min–max): turns/s %s, CPU/turn %s" % (
    m([r[2] / r[0] for r in rows], "%.3f"), m([r[3] / r[1] for r in rows], "%.3f")))'
