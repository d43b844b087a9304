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

turns() {
    curl -s "http://127.0.0.1:$port/metrics" | awk '/^turnstile_turns_total/ {s += $2} END {print s}'
}

events=futex,epoll_wait,writev,recvfrom,sched_yield,pwrite64,sync_file_range
for bin in "${bins[@]}"; do
    start_turnstile "$bin" "$c"
    drive_chat "$c" 7s >/dev/null &
    wrk_pid=$!
    sleep 1
    t0=$(turns)
    perf stat -e "$(sed 's/\([a-z_0-9]*\)/syscalls:sys_enter_\1/g' <<<"$events"),context-switches,task-clock" \
        -p "$server_pid" -- sleep 4 2>"$work/stat.txt"
    t1=$(turns)
    wait "$wrk_pid"
    stop_turnstile
    python3 - "$t0" "$t1" "$work/stat.txt" "$bin" <<'PY'
import re, sys
turns = float(sys.argv[2]) - float(sys.argv[1])
fields = []
for line in open(sys.argv[3]):
    m = re.match(r"\s*([\d,.]+)\s+(?:msec\s+)?(\S+)", line)
    if not m or m.group(2) == "seconds":
        continue
    name = m.group(2).replace("syscalls:sys_enter_", "")
    value = float(m.group(1).replace(",", ""))
    if name == "task-clock":
        fields.append(f"cpu_us={value * 1000 / turns:.0f}")
    else:
        fields.append(f"{name}={value / turns:.2f}")
print(sys.argv[4], f"turns/s={turns / 4:.0f}", " ".join(fields))
PY
done
