#!/usr/bin/env bash
# What a drain finishes (issue 44): CLIENTS non-streaming OpenAI-style clients start at once
# against `turnstile serve` behind a slow model (`examples/slow_model.rs`, a test double that
# answers after TOTAL_MS); once every turn is running, the server gets SIGTERM. Three runs,
# fresh server each; per run: the turns running at SIGTERM, finished and left (the server's
# drain report), the clients answered 200, the drain's length and the exit status (0, or 75
# when turns were left). Then a restart on the same data dir replays what was cut off and
# must answer nothing twice: each client's session holds its message once and one answer.
# GRACE_MS below TOTAL_MS shows the other outcome: turns cut off, exit 75, replayed.
# Usage: benches/loadtest/drain.sh [BINARY]   (default target/release/turnstile; env
#        CLIENTS 100, TOTAL_MS 3000, GRACE_MS 30000)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(realpath "${1:-target/release/turnstile}")
clients=${CLIENTS:-100}
total_ms=${TOTAL_MS:-3000}
grace_ms=${GRACE_MS:-30000}
profile_dir=$(dirname "$bin")
if [ "$(basename "$profile_dir")" = release ]; then
    cargo build --release --locked --quiet --example slow_model --example chat_clients
else
    cargo build --locked --quiet --example slow_model --example chat_clients
fi
model_bin=$profile_dir/examples/slow_model
clients_bin=$profile_dir/examples/chat_clients

work=$(mktemp -d)
model_port=18821
port=17995
model_pid=""
server_pid=""
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
    [ -n "$model_pid" ] && kill "$model_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

"$model_bin" --port "$model_port" --first-ms "$total_ms" --chunks 1 --total-ms "$total_ms" 2>/dev/null &
model_pid=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$model_port/v1/models" >/dev/null && break; sleep 0.1; done

cat >"$work/turnstile.toml" <<TOML
[model]
provider = "openai"
base_url = "http://127.0.0.1:$model_port/v1"
model = "slow-model"
[server]
shutdown_grace_ms = $grace_ms
TOML

start_server() {
    RUST_LOG=info "$bin" serve --config "$work/turnstile.toml" --data-dir "$work/data" \
        --listen "127.0.0.1:$port" >"$work/server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 1 400); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.05; done
}
# Messages accepted and not yet answered (every one of them a running turn here: far fewer
# than `lanes.max_concurrent_turns`).
unanswered() { curl -sf "http://127.0.0.1:$port/metrics" | awk '/^turnstile_inbox_depth /{print $2}'; }
field() { python3 -c 'import json,sys; r=json.load(sys.stdin); print(" ".join(str(r[k]) for k in sys.argv[1:]))' "$@"; }

for run in 1 2 3; do
    rm -rf "$work/data"
    start_server
    "$clients_bin" --url "http://127.0.0.1:$port/v1" --clients "$clients" --stream 0 --tag "d$run" >"$work/out" &
    cpid=$!
    # Every turn running (the model holds each for TOTAL_MS), then SIGTERM.
    for _ in $(seq 1 200); do
        [ "$(unanswered || echo 0)" = "$clients" ] && break
        sleep 0.02
    done
    sleep 0.3
    at_term=$(unanswered || echo "?")
    kill -TERM "$server_pid"
    set +e
    wait "$server_pid"
    status=$?
    set -e
    server_pid=""
    wait "$cpid"
    read -r answered failed <<<"$(field answered failed <"$work/out")"
    report=$(grep -E "drained|drain: running" "$work/server.log" | tail -1 | sed 's/\x1b\[[0-9;]*m//g')
    finished=$(grep -oE 'finished=[0-9]+' <<<"$report" | cut -d= -f2 || true)
    left=$(grep -oE 'left_running=[0-9]+' <<<"$report" | cut -d= -f2 || true)
    elapsed=$(grep -oE 'elapsed_ms=[0-9]+' <<<"$report" | cut -d= -f2 || true)
    # The restart replays nothing that was answered: each client's session has its message
    # once, answered once.
    start_server
    # Turns the drain cut off are replayed first.
    for _ in $(seq 1 $((total_ms / 20 * 4))); do
        [ "$(unanswered || echo 1)" = "0" ] && break
        sleep 0.02
    done
    twice=0
    for n in $(seq 0 $((clients - 1))); do
        key=$(python3 -c 'import urllib.parse,sys; print(urllib.parse.quote(sys.argv[1], safe=""))' "d$run-$n")
        users=$(curl -sf "http://127.0.0.1:$port/v1/sessions/$key/transcript" |
            python3 -c 'import json,sys; e=json.load(sys.stdin); e=e.get("entries", e) if isinstance(e, dict) else e; print(sum(1 for x in e if x["kind"]=="user"), sum(1 for x in e if x["kind"]=="assistant"))' 2>/dev/null || echo "0 0")
        [ "$users" = "1 1" ] || twice=$((twice + 1))
    done
    kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=""
    echo "run $run: unanswered at SIGTERM $at_term, finished ${finished:-?}, left ${left:-0}, drain ${elapsed:-?} ms, exit $status; clients answered $answered/$clients ($failed failed); sessions not answered exactly once after the restart: $twice"
done
