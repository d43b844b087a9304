#!/usr/bin/env bash
# Memory on real conversations: LoCoMo conversations replayed into group chats on the
# built-in defaults (or --config), every question of categories 1–4 asked at the end; prints
# the per-conversation table of the first run and, over three runs, the median and spread of
# the uncached assembly time per question (the coverage figures are deterministic).
# The data is not in the repository: pass the LoCoMo conversation files (conv-*.json).
# Usage: benches/loadtest/locomo.sh BINARY FILE... [-- EXTRA LOADTEST ARGS]
set -euo pipefail
bin=${1:?usage: locomo.sh BINARY FILE... [-- ARGS]}
shift
files=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do files+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#files[@]} -gt 0 ] || { echo "no LoCoMo files given" >&2; exit 2; }
RUST_LOG=warn "$bin" loadtest --scenario locomo --data "${files[@]}" "$@" 2>/dev/null
for run in 1 2 3; do
    RUST_LOG=warn "$bin" loadtest --scenario locomo --data "${files[@]}" --json "$@" 2>/dev/null |
        python3 -c 'import json,sys; t=json.load(sys.stdin)["total"]; print(t["assembly_us_p50"], t["assembly_us_p99"])'
done | python3 -c '
import sys, statistics as st
rows = [list(map(int, l.split())) for l in sys.stdin if l.strip()]
def m(i): v = [r[i] for r in rows]; return f"{st.median(v)} ({min(v)}–{max(v)})"
print(f"assembly per question, 3 runs, median (spread): p50 {m(0)} µs, p99 {m(1)} µs")'
