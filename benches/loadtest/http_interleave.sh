#!/usr/bin/env bash
# Compares several builds (or wrappers that start one with other settings) on the HTTP turn of
# `http_turns.sh` (wrk driving POST /v1/chat/completions over 1,000 sessions, nginx as an
# instant OpenAI-compatible model), in interleaved rounds: each build once per round, in the
# order given, each run on a fresh server, so that builds are compared seconds apart on this
# drifting machine. Prints every run, then per build the median (min–max) of turns/s, p50, p99
# and CPU per turn (`http_ab.sh` does two builds and the per-pair ratios).
# Usage: benches/loadtest/http_interleave.sh BINARY... ; env ROUNDS (4), RUN_SECONDS (8),
#        CONNECTIONS (16), DURABILITY (strict), SESSIONS (1000)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -gt 0 ] || { echo "usage: $0 BINARY..." >&2; exit 2; }
bins=()
for b in "$@"; do bins+=("$(realpath "$b")"); done
rounds=${ROUNDS:-4}
secs=${RUN_SECONDS:-8}
c=${CONNECTIONS:-16}

. "$here/http/harness.sh"
need_wrk_and_nginx
start_single_server_harness "${DURABILITY:-strict}"

declare -A runs
for round in $(seq "$rounds"); do
    for i in "${!bins[@]}"; do
        measure_run "${bins[$i]}" "$c" "$secs"
        echo "round $round, $(basename "${bins[$i]}"): turns/s p50_ms p99_ms cpu_us non2xx = $run_result"
        runs[$i]+="$run_result"$'\n'
    done
done
echo "| build | connections | turns/s | p50 | p99 | CPU per turn |"
echo "|---|---|---|---|---|---|"
for i in "${!bins[@]}"; do
    printf '%s' "${runs[$i]}" | median_row "$(basename "${bins[$i]}")" "$c" -- %.0f %.2f:ms %.2f:ms %.0f:µs
done
