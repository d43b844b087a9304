#!/usr/bin/env bash
# Storage at scale (issue 39), the two fills. Each run writes a fresh data dir under
# WORK (default: a temporary dir) and prints one JSON object (see scale.py for each figure).
# Usage: benches/loadtest/scale.sh BINARY [WORK]
#   SCALE_SESSIONS / SCALE_MESSAGES / SCALE_BUDGET / SCALE_IDLE_S override the first run.
set -euo pipefail
bin=$(realpath "$1")
work=${2:-$(mktemp -d)}
here=$(dirname "$0")
# 1,000,000 sessions x 2 messages with an 8 GiB budget.
python3 "$here/scale.py" "$bin" "$work/million" --sessions "${SCALE_SESSIONS:-1000000}" \
    --messages "${SCALE_MESSAGES:-2}" --budget "${SCALE_BUDGET:-8589934592}" --idle-s "${SCALE_IDLE_S:-30}"
# 200,000 sessions x 1 message on the defaults (1 GiB), then 90 s idle with the prober.
python3 "$here/scale.py" "$bin" "$work/defaults" --sessions 200000 --messages 1 --idle-s 90
