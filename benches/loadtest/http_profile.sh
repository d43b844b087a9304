#!/usr/bin/env bash
# Profiles the full turn over HTTP: the same harness as `http_turns.sh` (wrk driving
# POST /v1/chat/completions over 1,000 sessions, nginx as an instant OpenAI-compatible model,
# strict durability), with `perf record --call-graph dwarf -F 499` on the server for 5 s of an
# 8 s run; then prints the samples per stage of a turn (`profile_stages.py`) and the syscalls
# and context switches per turn (`perf stat` over 4 s of a second run).
# Usage: benches/loadtest/http_profile.sh [BINARY] [CONNECTIONS] [OUT_DIR]
#        (default: target/release/turnstile, 16, a temporary dir; perf.data is kept in OUT_DIR)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(realpath "${1:-target/release/turnstile}")
c=${2:-16}
out=${3:-$(mktemp -d)}
mkdir -p "$out"
command -v perf >/dev/null || { echo "perf is needed (linux-perf / linux-tools)" >&2; exit 1; }
. "$here/http/harness.sh"
need_wrk_and_nginx

start_single_server_harness strict

start_turnstile "$bin" "$c"
drive_chat "$c" 8s >"$work/wrk.out" &
wrk_pid=$!
sleep 1
perf record -F 499 --call-graph dwarf,16384 -p "$server_pid" -o "$out/perf.data" -- sleep 5 \
    >/dev/null 2>&1
wait "$wrk_pid"
grep '^JSON ' "$work/wrk.out" | sed 's/^JSON /wrk: /'
stop_turnstile

echo "per turn:"
count_switches "$bin" "$c"
perf script -i "$out/perf.data" -F comm,tid,ip,sym --no-inline 2>/dev/null >"$out/stacks.txt"
python3 "$here/profile_stages.py" "$out/stacks.txt"
echo "perf data: $out/perf.data"
