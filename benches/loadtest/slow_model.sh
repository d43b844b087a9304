#!/usr/bin/env bash
# A slow model behind Turnstile (issue 15's benchmarks). `examples/slow_model.rs` is the model
# (a test double: first token after FIRST_MS, CHUNKS chunks, the last at TOTAL_MS);
# `examples/chat_clients.rs` fires N concurrent OpenAI-style clients, one request each, each
# its own session. Three runs of each row, fresh server per run; prints every run and the
# median (min–max):
#   1. streaming, STREAM_CLIENTS clients, directly at the model: its own time to first token;
#   2. the same through `turnstile serve` (strict durability, `[model] provider = "openai"`):
#      TTFT p50/p99, its overhead over row 1's medians, and RSS per in-flight turn (peak VmRSS
#      during the run minus VmRSS after one warm-up turn, divided by the clients);
#   3. non-streaming, SESSIONS clients through Turnstile: answers/s against the ideal
#      SESSIONS / ((TOTAL_MS + RAMP_MS) / 1000).
# Clients start all at once (RAMP_MS=0, a burst) or spread evenly over RAMP_MS (with RAMP_MS =
# TOTAL_MS about STREAM_CLIENTS streams are in flight at the peak, arriving steadily).
# Usage: benches/loadtest/slow_model.sh [BINARY]   (default target/release/turnstile; env
#        STREAM_CLIENTS 1000, SESSIONS 10000, FIRST_MS 100, CHUNKS 40, TOTAL_MS 2000, RAMP_MS 0)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(realpath "${1:-target/release/turnstile}")
stream_clients=${STREAM_CLIENTS:-1000}
sessions=${SESSIONS:-10000}
first_ms=${FIRST_MS:-100}
chunks=${CHUNKS:-40}
total_ms=${TOTAL_MS:-2000}
ramp_ms=${RAMP_MS:-0}
cargo build --release --locked --quiet --example slow_model --example chat_clients
model_bin=target/release/examples/slow_model
clients_bin=target/release/examples/chat_clients

work=$(mktemp -d)
model_port=18811
port=17991
model_pid=""
server_pid=""
stop_server() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
        server_pid=""
    fi
}
cleanup() {
    stop_server
    [ -n "$model_pid" ] && kill "$model_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

"$model_bin" --port "$model_port" --first-ms "$first_ms" --chunks "$chunks" --total-ms "$total_ms" 2>/dev/null &
model_pid=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$model_port/v1/models" >/dev/null && break; sleep 0.1; done

cat >"$work/turnstile.toml" <<TOML
[model]
provider = "openai"
base_url = "http://127.0.0.1:$model_port/v1"
model = "slow-model"
max_connections = $((sessions + 1000))
[lanes]
max_concurrent_turns = $((sessions + 1000))
[server]
max_connections = $((sessions + 1000))
TOML

start_server() {
    rm -rf "$work/data"
    RUST_LOG=warn "$bin" serve --config "$work/turnstile.toml" --data-dir "$work/data" \
        --listen "127.0.0.1:$port" 2>>"$work/server.log" &
    server_pid=$!
    for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.05; done
    # One turn first, so the tokenizer and the model client's pool are warm.
    "$clients_bin" --url "http://127.0.0.1:$port/v1" --clients 1 --stream 0 --tag warm >/dev/null
}
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
field() { python3 -c 'import json,sys; r=json.load(sys.stdin); v=[eval(e, {"r": r}) for e in sys.argv[1:]]; print(" ".join(str(round(x, 2)) if isinstance(x, float) else str(x) for x in v))' "$@"; }
median() { python3 -c 'import statistics as st,sys; v=[float(x) for x in sys.argv[1:]]; print("%.6g (%.6g–%.6g)" % (st.median(v), min(v), max(v)))' "$@"; }

direct_p50=(); direct_p99=()
for run in 1 2 3; do
    out=$("$clients_bin" --url "http://127.0.0.1:$model_port/v1" --clients "$stream_clients" --stream 1 --ramp-ms "$ramp_ms" --tag "direct$run")
    read -r p50 p99 answered <<<"$(field 'r["ttft_ms"]["p50"]' 'r["ttft_ms"]["p99"]' 'r["answered"]' <<<"$out")"
    echo "direct run $run: answered $answered/$stream_clients, ttft p50 $p50 ms, p99 $p99 ms" >&2
    direct_p50+=("$p50"); direct_p99+=("$p99")
done
d50=$(python3 -c 'import statistics as st,sys; print(st.median(map(float,sys.argv[1:])))' "${direct_p50[@]}")
d99=$(python3 -c 'import statistics as st,sys; print(st.median(map(float,sys.argv[1:])))' "${direct_p99[@]}")

via_p50=(); via_p99=(); over50=(); over99=(); per_turn=(); via_answered=()
for run in 1 2 3; do
    start_server
    idle=$(rss_kib "$server_pid")
    "$clients_bin" --url "http://127.0.0.1:$port/v1" --clients "$stream_clients" --stream 1 --ramp-ms "$ramp_ms" --tag "via$run" >"$work/out" &
    cpid=$!
    peak=$idle
    while kill -0 "$cpid" 2>/dev/null; do
        now=$(rss_kib "$server_pid"); [ "$now" -gt "$peak" ] && peak=$now
        sleep 0.05
    done
    wait "$cpid"
    read -r p50 p99 answered <<<"$(field 'r["ttft_ms"]["p50"]' 'r["ttft_ms"]["p99"]' 'r["answered"]' <"$work/out")"
    kib=$(python3 -c "print(round(($peak - $idle) / $stream_clients, 2))")
    echo "via run $run: answered $answered/$stream_clients, ttft p50 $p50 ms, p99 $p99 ms, RSS idle $idle KiB peak $peak KiB: $kib KiB per in-flight turn" >&2
    via_p50+=("$p50"); via_p99+=("$p99"); per_turn+=("$kib"); via_answered+=("$answered")
    over50+=("$(python3 -c "print($p50 - $d50)")"); over99+=("$(python3 -c "print($p99 - $d99)")")
    stop_server
done

rates=(); plain_answered=()
for run in 1 2 3; do
    start_server
    out=$("$clients_bin" --url "http://127.0.0.1:$port/v1" --clients "$sessions" --stream 0 --ramp-ms "$ramp_ms" --tag "plain$run")
    read -r rate answered p99 <<<"$(field 'r["answers_per_s"]' 'r["answered"]' 'r["total_ms"]["p99"]' <<<"$out")"
    echo "non-streaming run $run: answered $answered/$sessions, $rate answers/s, total p99 $p99 ms" >&2
    rates+=("$rate"); plain_answered+=("$answered")
    stop_server
done

ideal=$(python3 -c "print($sessions / (($total_ms + $ramp_ms) / 1000))")
echo "model's own TTFT ($stream_clients streaming clients, ramp $ramp_ms ms, direct): p50 $(median "${direct_p50[@]}") ms, p99 $(median "${direct_p99[@]}") ms"
echo "through Turnstile: TTFT p50 $(median "${via_p50[@]}") ms, p99 $(median "${via_p99[@]}") ms; answered $(median "${via_answered[@]}")/$stream_clients"
echo "TTFT overhead: p50 $(median "${over50[@]}") ms, p99 $(median "${over99[@]}") ms"
echo "RSS per in-flight streaming turn: $(median "${per_turn[@]}") KiB"
echo "non-streaming, $sessions sessions (ramp $ramp_ms ms): $(median "${rates[@]}") answers/s (ideal $ideal); answered $(median "${plain_answered[@]}")/$sessions"
