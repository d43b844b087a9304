#!/usr/bin/env bash
# Time to first token of a real local model (llama.cpp's llama-server with SmolLM2-135M, built by
# `shared/realmodel/setup.sh DIR`), directly and through `turnstile serve`: one session, N
# sequential streaming requests each way (alternating direct and through, so drift hits both),
# prints every request and the median (min–max) TTFT and total of each, and the paired
# median difference.
# Usage: benches/loadtest/real_model.sh REALMODEL_DIR [BINARY] [N]   (defaults: target/release/turnstile, 20)
set -euo pipefail
cd "$(dirname "$0")/../.."
rm_dir=${1:?usage: real_model.sh REALMODEL_DIR [BINARY] [N]}
bin=$(realpath "${2:-target/release/turnstile}")
n=${3:-20}
cargo build --release --locked --quiet --example chat_clients
clients_bin=target/release/examples/chat_clients
work=$(mktemp -d)
model_port=18821
port=17992
model_pid=""
server_pid=""
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    [ -n "$model_pid" ] && kill "$model_pid" 2>/dev/null && wait "$model_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
"$rm_dir/serve.sh" "$model_port" 2048 >"$work/model.log" 2>&1 &
model_pid=$!
for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$model_port/health" >/dev/null && break; sleep 0.1; done
cat >"$work/turnstile.toml" <<TOML
[model]
provider = "openai"
base_url = "http://127.0.0.1:$model_port/v1"
model = "smollm2"
TOML
RUST_LOG=warn "$bin" serve --config "$work/turnstile.toml" --data-dir "$work/data" \
    --listen "127.0.0.1:$port" 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.05; done
field() { python3 -c 'import json,sys; r=json.load(sys.stdin); print(round(r["ttft_ms"]["p50"], 1), round(r["total_ms"]["p50"], 1), r["answered"])'; }
: >"$work/rows"
for i in $(seq 1 "$n"); do
    read -r dt dtot dok <<<"$("$clients_bin" --url "http://127.0.0.1:$model_port/v1" --clients 1 --stream 1 --tag "direct-$i" | field)"
    read -r vt vtot vok <<<"$("$clients_bin" --url "http://127.0.0.1:$port/v1" --clients 1 --stream 1 --tag real-session | field)"
    echo "request $i: direct TTFT $dt ms (total $dtot, ok $dok); through TTFT $vt ms (total $vtot, ok $vok)" >&2
    echo "$dt $dtot $vt $vtot" >>"$work/rows"
done
python3 - "$work/rows" <<'PY'
import statistics as st, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
def m(v): return "%.1f (%.1f–%.1f)" % (st.median(v), min(v), max(v))
print("direct:  TTFT", m([r[0] for r in rows]), "ms, total", m([r[1] for r in rows]), "ms")
print("through: TTFT", m([r[2] for r in rows]), "ms, total", m([r[3] for r in rows]), "ms")
print("paired TTFT difference (through − direct):", m([r[2] - r[0] for r in rows]), "ms")
PY
