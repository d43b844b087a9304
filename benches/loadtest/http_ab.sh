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

# One run of binary $1: prints "turns/s cpu_us_per_turn".
run() {
    rm -rf "$work/data"
    OPENAI_API_KEY=bench RUST_LOG=warn "$1" serve --config "$work/turnstile.toml" \
        --data-dir "$work/data" --listen "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 100); do
        curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
        sleep 0.1
    done
    SESSIONS=$sessions wrk -t1 -c"$c" -d2s -s "$here/http/chat.lua" "http://127.0.0.1:$port" >/dev/null
    local t0 t1 out
    t0=$(cpu_ticks "$server_pid")
    out=$(SESSIONS=$sessions wrk -t1 -c"$c" -d"${secs}s" -s "$here/http/chat.lua" "http://127.0.0.1:$port")
    t1=$(cpu_ticks "$server_pid")
    kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""
    python3 -c '
import json, os, sys
r = json.loads(sys.argv[1])
ok = r["requests"] - r["non2xx"]
ticks = int(sys.argv[2]) - int(sys.argv[3])
print("%.0f %.0f" % (ok / r["seconds"], ticks / os.sysconf("SC_CLK_TCK") / max(ok, 1) * 1e6))' \
        "$(grep '^JSON ' <<<"$out" | sed 's/^JSON //')" "$t1" "$t0"
}

rows=()
for p in $(seq "$pairs"); do
    a=$(run "$bin_a")
    b=$(run "$bin_b")
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
