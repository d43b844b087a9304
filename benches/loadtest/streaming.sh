#!/usr/bin/env bash
# Streaming load: CLIENTS (default 1,000) concurrent streaming /v1/chat/completions clients
# against `turnstile serve` in front of a fake streaming model (first token after 100 ms, 40
# chunks, 2 s in all). Prints TTFT direct and through Turnstile (p50/p99), the overhead, how
# many were answered, and RSS per in-flight turn. Goals: TTFT overhead p99 <= 5 ms, <= 24 KiB
# per in-flight turn.
# Usage: benches/loadtest/streaming.sh [BINARY] [CLIENTS]   (default: target/release/turnstile, 1000)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-target/release/turnstile}
clients=${2:-1000}
# Two sockets per client through Turnstile (client side and model side), plus the server's.
ulimit -n 16384 2>/dev/null || ulimit -n "$(ulimit -Hn)"
exec python3 benches/loadtest/streaming_bench.py "$bin" "$clients"
