#!/usr/bin/env bash
# One session, N sequential turns through POST /v1/chat/completions (each request waits for
# its reply before the next is sent), default config: the latency a single user sees, with the
# built-in echo model. Starts `turnstile serve` on a fresh data dir and a free port, runs the
# client three times (a fresh session each), prints every run and the median (min–max) of
# p50/p99/max, and stops the server.
# Usage: benches/loadtest/sequential.sh [BINARY] [TURNS]   (defaults: target/release/turnstile, 200)
set -euo pipefail
bin=${1:-target/release/turnstile}
turns=${2:-200}
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
RUST_LOG=warn "$bin" serve --data-dir "$dir/data" --listen "127.0.0.1:$port" 2>"$dir/server.log" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
    sleep 0.1
done
python3 - "$port" "$turns" <<'PY'
import http.client, json, statistics as st, sys, time
port, turns = int(sys.argv[1]), int(sys.argv[2])
def run(session):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    lat = []
    for i in range(turns):
        body = json.dumps({"model": "echo", "user": session,
                           "messages": [{"role": "user", "content": f"turn {i}: hello there"}]})
        t0 = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        lat.append((time.perf_counter() - t0) * 1000)
        if r.status != 200:
            sys.exit(f"turn {i}: HTTP {r.status}: {data[:200]!r}")
    lat.sort()
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
    return pick(0.5), pick(0.99), lat[-1], sum(1 for x in lat if x > 100)
rows = []
for k in range(3):
    p50, p99, mx, slow = run(f"sequential-{k}-{time.time_ns()}")
    print(f"run {k + 1}: {turns} turns, p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {mx:.2f} ms, over 100 ms: {slow}")
    rows.append((p50, p99, mx))
for i, name in enumerate(["p50_ms", "p99_ms", "max_ms"]):
    v = [r[i] for r in rows]
    print(f"{name}: median {st.median(v):.2f} ({min(v):.2f}–{max(v):.2f})")
PY
