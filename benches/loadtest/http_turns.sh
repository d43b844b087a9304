#!/usr/bin/env bash
# The full turn over HTTP: wrk drives POST /v1/chat/completions (a new message per request over
# SESSIONS sessions) against `turnstile serve` whose model is nginx answering instantly
# (`[model] provider = "openai"`). Three runs per connection count; prints each run and the
# median (min–max) of turns/s, p50, p99 and server CPU per turn (utime+stime ÷ turns).
# Installs wrk and nginx-light with apt-get when missing.
# Usage: benches/loadtest/http_turns.sh [BINARY] [SECONDS] [CONNECTIONS...]
#        (default: target/release/turnstile, 20 s, 16 64); env SESSIONS (1000), DURABILITY (strict)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(realpath "${1:-target/release/turnstile}")
secs=${2:-20}
shift 2 || shift $# || true
conns=("$@")
[ ${#conns[@]} -gt 0 ] || conns=(16 64)
sessions=${SESSIONS:-1000}
durability=${DURABILITY:-strict}

. "$here/http/harness.sh"
need_wrk_and_nginx

work=$(mktemp -d)
fake_port=18801
port=17990
nginx_pid=""
server_pid=""
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    [ -n "$nginx_pid" ] && kill "$nginx_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

start_fake_model "$work" "$fake_port"
write_fake_model_config "$work/turnstile.toml" "$fake_port" "$durability"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

for c in "${conns[@]}"; do
    rows=()
    for run in 1 2 3; do
        rm -rf "$work/data"
        OPENAI_API_KEY=bench RUST_LOG=warn "$bin" serve --config "$work/turnstile.toml" \
            --data-dir "$work/data" --listen "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
        server_pid=$!
        for _ in $(seq 100); do
            curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
            sleep 0.1
        done
        # Warm-up: every session exists and the model connection pool is open.
        SESSIONS=$sessions wrk -t1 -c"$c" -d3s -s "$here/http/chat.lua" "http://127.0.0.1:$port" >/dev/null
        t0=$(cpu_ticks "$server_pid")
        out=$(SESSIONS=$sessions wrk -t1 -c"$c" -d"${secs}s" -s "$here/http/chat.lua" "http://127.0.0.1:$port")
        t1=$(cpu_ticks "$server_pid")
        kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""
        json=$(grep '^JSON ' <<<"$out" | sed 's/^JSON //')
        row=$(python3 -c '
import json, os, sys
r = json.loads(sys.argv[1])
ticks = int(sys.argv[2]) - int(sys.argv[3])
ok = r["requests"] - r["non2xx"]
rate = ok / r["seconds"]
cpu_us = ticks / os.sysconf("SC_CLK_TCK") / max(ok, 1) * 1e6
print("%.0f %.2f %.2f %.0f %d" % (rate, r["p50_ms"], r["p99_ms"], cpu_us, r["non2xx"]))' "$json" "$t1" "$t0")
        echo "c=$c run $run: turns/s p50_ms p99_ms cpu_us_per_turn non2xx = $row"
        rows+=("$row")
    done
    printf '%s\n' "${rows[@]}" | python3 -c '
import sys, statistics as st
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
def m(i, fmt):
    v = [r[i] for r in rows]
    return "%s (%s–%s)" % (fmt % st.median(v), fmt % min(v), fmt % max(v))
print("| %s | %s | %s ms | %s ms | %s µs |" % (sys.argv[1], m(0, "%.0f"), m(1, "%.2f"), m(2, "%.2f"), m(3, "%.0f")))' "$c"
done
