#!/usr/bin/env bash
# The standard in-process set, three runs each, back to back: prints every run and the median
# (min–max) per row. Rows: default config batched and strict (answered msgs/s and model
# turns/s), every message its own turn (followup.toml, turns/s), and submit → reply latency at
# 70% of that row's median peak.
# Usage: benches/loadtest/standard.sh [BINARY]   (default: target/release/turnstile; env
# SESSIONS, default 10000, only to smoke-test the script)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-target/release/turnstile}
sessions=${SESSIONS:-10000}
base=(loadtest --in-process --sessions "$sessions" --messages 10 --concurrency 256 --json)

run() { RUST_LOG=warn "$bin" "$@" 2>/dev/null; }
field() { python3 -c 'import json,sys; r=json.load(sys.stdin); print(" ".join(str(eval(e, {"r": r})) for e in sys.argv[1:]))' "$@"; }
summary() {
    python3 -c '
import sys, statistics as st
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
cols = sys.argv[2:]
out = []
for i, name in enumerate(cols):
    v = [r[i] for r in rows]
    out.append("%s %.6g (%.6g–%.6g)" % (name, st.median(v), min(v), max(v)))
print(sys.argv[1] + ": median (spread): " + ", ".join(out))' "$@"
}

row() {
    local label=$1; shift
    local exprs=$1; shift
    local names=$1; shift
    local rows=()
    for i in 1 2 3; do
        # shellcheck disable=SC2086
        r=$(run "$@" | field $exprs)
        echo "$label run $i: $names = $r" >&2
        rows+=("$r")
    done
    printf '%s\n' "${rows[@]}" | summary "$label" $names
}

row "batched, default config" 'r["replies_per_second"] r["turns_per_second"]' "answered_per_s turns_per_s" \
    "${base[@]}" --durability batched
row "strict, default config" 'r["replies_per_second"] r["turns_per_second"]' "answered_per_s turns_per_s" \
    "${base[@]}" --durability strict
peak_line=$(row "batched, followup.toml" 'r["turns_per_second"]' "turns_per_s" \
    "${base[@]}" --durability batched --config "$here/followup.toml")
echo "$peak_line"
peak=$(sed -E 's/.*turns_per_s ([0-9.e+]+) .*/\1/' <<<"$peak_line")
rate=$(python3 -c "print(int(float('$peak') * 0.7))")
row "submit→reply at 70% of peak ($rate/s)" 'r["turns_per_second"] r["turn_latency"]["p50_ms"] r["turn_latency"]["p99_ms"]' "turns_per_s p50_ms p99_ms" \
    loadtest --in-process --sessions "$sessions" --messages 6 --concurrency 512 --json \
    --durability batched --config "$here/followup.toml" --rate "$rate"
