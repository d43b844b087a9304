#!/usr/bin/env bash
# The group-memory scenario, three runs per seed: prints one line per run and, per seed, the
# median and spread (min–max) of the answerable share and the prompt tokens per turn.
# Usage: benches/loadtest/group_memory.sh [BINARY] [SEEDS...]   (default: target/release/turnstile, 42 7 1234)
set -euo pipefail
bin=${1:-target/release/turnstile}
shift || true
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(42 7 1234)
for seed in "${seeds[@]}"; do
    rows=()
    for run in 1 2 3; do
        json=$(RUST_LOG=warn "$bin" loadtest --scenario group-memory --seed "$seed" --json 2>/dev/null)
        row=$(python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["answerable_pct"], r["prompt_tokens_p50"], r["prompt_tokens_max"], r["baseline_tokens"], r["budget"], r["via_summary"], r["via_recall"], r["via_history"], r["compactions"])' <<<"$json")
        echo "seed $seed run $run: answerable% p50 max baseline budget via_summary via_recall via_history compactions = $row"
        rows+=("$row")
    done
    printf '%s\n' "${rows[@]}" | python3 -c '
import sys, statistics as st
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
col = lambda i: [r[i] for r in rows]
def m(i): v = col(i); return f"{st.median(v):g} ({min(v):g}–{max(v):g})"
print(f"seed '"$seed"' median (spread): answerable {m(0)}%, prompt tokens p50 {m(1)}, max {m(2)}, baseline {m(3)}, budget {m(4):s}")'
done
