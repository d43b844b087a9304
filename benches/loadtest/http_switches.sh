#!/usr/bin/env bash
# Counts syscalls and context switches per HTTP turn for each binary given, in the order given
# (e.g. A B A B A B): the `http_turns.sh` harness (wrk driving POST /v1/chat/completions over
# 1,000 sessions, nginx as an instant OpenAI-compatible model, strict durability), a fresh
# server per run, `perf stat` on the server for 4 s of a 7 s run at CONNECTIONS (16). Counts
# per turn move far less with the machine's speed than turns/s or CPU time do, so they show a
# change in wake-ups that timing buries. Prints one line per run.
# Usage: benches/loadtest/http_switches.sh BINARY... ; env CONNECTIONS (16), SESSIONS (1000)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ "$#" -ge 1 ] || { echo "usage: $0 BINARY..." >&2; exit 2; }
command -v perf >/dev/null || { echo "perf is needed (linux-perf / linux-tools)" >&2; exit 1; }
c=${CONNECTIONS:-16}
bins=()
for b in "$@"; do bins+=("$(realpath "$b")"); done

. "$here/http/harness.sh"
need_wrk_and_nginx
start_single_server_harness strict

for bin in "${bins[@]}"; do
    count_switches "$bin" "$c"
done
