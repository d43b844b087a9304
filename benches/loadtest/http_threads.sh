#!/usr/bin/env bash
# Where a turn's CPU and context switches go, thread by thread: the `http_turns.sh` harness
# (wrk driving POST /v1/chat/completions over 1,000 sessions, nginx as an instant
# OpenAI-compatible model, strict durability), a fresh server per binary, and each of the
# server's threads read from /proc before and after a run: CPU time (utime + stime, in the
# kernel's 10 ms ticks, so a thread that ran less than a tick reads 0), voluntary context
# switches (the thread blocked: parked, waited on a lock or the disk) and involuntary ones (it
# was preempted for another runnable thread), each ÷ turns. tokio names its runtime workers
# and its blocking-pool threads alike; the workers are started first, so the lowest
# TOKIO_WORKERS (default: the core count) thread ids of that name are shown as `runtime
# worker`, the rest as `blocking pool`.
# Usage: benches/loadtest/http_threads.sh [BINARY...] ; env CONNECTIONS (16), RUN_SECONDS (6),
#        SESSIONS (1000), TOKIO_WORKERS (nproc)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bins=()
for b in "${@:-target/release/turnstile}"; do bins+=("$(realpath "$b")"); done
c=${CONNECTIONS:-16}
secs=${RUN_SECONDS:-6}
workers=${TOKIO_WORKERS:-$(nproc)}

. "$here/http/harness.sh"
need_wrk_and_nginx
start_single_server_harness strict

# One line per thread: tid, name (spaces as _), voluntary, involuntary switches, CPU ticks.
snapshot() {
    local t
    for t in /proc/"$server_pid"/task/*; do
        printf '%s %s %s %s %s\n' "$(basename "$t")" "$(tr ' ' _ <"$t/comm")" \
            "$(awk '/^voluntary_ctxt/ {print $2}' "$t/status")" \
            "$(awk '/^nonvoluntary_ctxt/ {print $2}' "$t/status")" \
            "$(awk '{print $14 + $15}' "$t/stat")"
    done 2>/dev/null
}

for bin in "${bins[@]}"; do
    start_turnstile "$bin" "$c"
    snapshot >"$work/before.txt"
    t0=$(turns_so_far)
    drive_chat "$c" "${secs}s" >/dev/null
    t1=$(turns_so_far)
    snapshot >"$work/after.txt"
    stop_turnstile
    echo "$bin, $c connections:"
    python3 - "$work/before.txt" "$work/after.txt" "$t0" "$t1" "$workers" <<'PY'
import collections, os, re, sys
before = {l.split()[0]: l.split() for l in open(sys.argv[1])}
turns = float(sys.argv[4]) - float(sys.argv[3])
tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
rows = [l.split() for l in open(sys.argv[2])]
tokio = sorted((r for r in rows if r[1] == "tokio-rt-worker"), key=lambda r: int(r[0]))
worker_ids = {r[0] for r in tokio[: int(sys.argv[5])]}
groups = collections.defaultdict(lambda: [0, 0, 0.0, 0])
for tid, name, vol, invol, ticks in rows:
    b = before.get(tid, [tid, name, 0, 0, 0])
    if name == "tokio-rt-worker":
        name = "runtime worker" if tid in worker_ids else "blocking pool"
    else:
        name = re.sub(r"-\d+$", "-*", name)
    g = groups[name]
    g[0] += int(vol) - int(b[2])
    g[1] += int(invol) - int(b[3])
    g[2] += (int(ticks) - int(b[4])) * tick_us
    g[3] += 1
print(f"turns: {turns:.0f}")
print("| threads | count | CPU per turn | voluntary switches per turn | involuntary per turn |")
print("|---|---|---|---|---|")
total = [0, 0, 0.0]
for name, (vol, invol, cpu, n) in sorted(groups.items(), key=lambda kv: -kv[1][2]):
    total = [total[0] + vol, total[1] + invol, total[2] + cpu]
    print(f"| {name} | {n} | {cpu / turns:.1f} µs | {vol / turns:.3f} | {invol / turns:.3f} |")
print(f"| all | {len(rows)} | {total[2] / turns:.1f} µs | {total[0] / turns:.3f} | {total[1] / turns:.3f} |")
PY
done
