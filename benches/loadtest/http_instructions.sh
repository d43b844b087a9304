#!/usr/bin/env bash
# Instructions per HTTP turn, counted by valgrind (callgrind), for one or more builds: the
# `http_turns.sh` harness (POST /v1/chat/completions, nginx as an instant OpenAI-compatible
# model, strict durability) with a fixed, deterministic request sequence instead of wrk.
# Instruction counts do not move with this machine's speed, so two builds compare in one run
# even when turns/s cannot (the turns/s of the same binary drift by up to 2x here). Valgrind
# runs the server's threads one at a time: the counts cover the work of a turn, not the cost
# of two cores sharing it (wake-ups, stealing), and say nothing about latency.
# Usage: benches/loadtest/http_instructions.sh BINARY... (env REQUESTS 2000 measured after
#        WARMUP 1000, CONNECTIONS 4, SESSIONS 100; KEEP=DIR keeps the callgrind dumps there,
#        for `callgrind_annotate`). About 45 s per binary with 1,000 requests.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
requests=${REQUESTS:-2000}
warmup=${WARMUP:-1000}
conns=${CONNECTIONS:-4}
sessions=${SESSIONS:-100}
command -v valgrind >/dev/null || { echo "valgrind is needed" >&2; exit 1; }
. "$here/http/harness.sh"
need_wrk_and_nginx
start_single_server_harness strict

# Sends $1 requests (request i to session s<i mod SESSIONS>, text "msg <offset + i>") over
# CONNECTIONS keep-alive connections; fails on any answer that is not 200.
send() {
    python3 - "$port" "$1" "$2" "$conns" "$sessions" <<'PY'
import http.client, json, sys, threading
port, n, offset, conns, sessions = (int(a) for a in sys.argv[1:])
bad = []
def worker(w):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    for i in range(w, n, conns):
        body = json.dumps({"model": "fake-model", "user": f"s{i % sessions}",
                           "messages": [{"role": "user", "content": f"msg {offset + i}"}]})
        c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        if r.status != 200:
            bad.append(r.status)
threads = [threading.Thread(target=worker, args=(w,)) for w in range(conns)]
for t in threads:
    t.start()
for t in threads:
    t.join()
sys.exit(f"{len(bad)} answers were not 200: {bad[:5]}" if bad else 0)
PY
}

echo "| build | instructions per turn (millions) |"
echo "|---|---|"
for bin in "$@"; do
    bin=$(realpath "$bin")
    launch_turnstile valgrind --tool=callgrind --instr-atstart=no \
        --callgrind-out-file="$work/cg.%p" "$bin"
    send "$warmup" 0
    callgrind_control -i on "$server_pid" >/dev/null
    send "$requests" "$warmup"
    callgrind_control -i off "$server_pid" >/dev/null
    callgrind_control -d "$server_pid" >/dev/null
    kill "$server_pid"
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
    # The dump holds the counts since collection was switched on (its `totals`; the final dump at exit: zero).
    total=$(cat "$work"/cg.* | awk '/^totals:/ {s += $2} END {print s}')
    if [ -n "${KEEP:-}" ]; then cp "$work"/cg.* "$KEEP"/; fi
    rm -f "$work"/cg.*
    awk -v t="$total" -v n="$requests" -v b="$bin" 'BEGIN {printf "| %s | %.3f |\n", b, t / n / 1e6}'
done
