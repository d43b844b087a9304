#!/usr/bin/env bash
# The full turn over HTTP: wrk drives POST /v1/chat/completions (a new message per request over
# SESSIONS sessions) against `turnstile serve` whose model is nginx answering instantly
# (`[model] provider = "openai"`). Three runs per connection count; prints each run and the
# median (min–max) of turns/s, p50, p99 and server CPU per turn (utime+stime ÷ turns).
# Installs wrk and nginx-light with apt-get when missing.
# Usage: benches/loadtest/http_turns.sh [BINARY] [SECONDS] [CONNECTIONS...]
#        (default: target/release/turnstile, 20 s, 16 64); env SESSIONS (1000), DURABILITY (strict),
#        STORAGE_EXTRA (more [storage] lines)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(realpath "${1:-target/release/turnstile}")
secs=${2:-20}
shift 2 || shift $# || true
conns=("$@")
[ ${#conns[@]} -gt 0 ] || conns=(16 64)
durability=${DURABILITY:-strict}

. "$here/http/harness.sh"
need_wrk_and_nginx

start_single_server_harness "$durability"

for c in "${conns[@]}"; do
    rows=()
    for run in 1 2 3; do
        measure_run "$bin" "$c" "$secs"
        row=$run_result
        echo "c=$c run $run: turns/s p50_ms p99_ms cpu_us_per_turn non2xx = $row"
        rows+=("$row")
    done
    printf '%s\n' "${rows[@]}" | median_row "$c" -- %.0f %.2f:ms %.2f:ms %.0f:µs
done
