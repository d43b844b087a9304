# Shared by the HTTP load scripts (`http_*.sh`, `cluster.sh`); source it.

# Installs wrk and nginx-light with apt-get when missing; sets `nginx_bin`.
need_wrk_and_nginx() {
    local need=()
    command -v wrk >/dev/null || need+=(wrk)
    command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
    if [ ${#need[@]} -gt 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
        # The package starts its own nginx service; the harness runs its own instance.
        (service nginx stop || systemctl stop nginx) >/dev/null 2>&1 || true
    fi
    nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
}

# Starts nginx as an instant OpenAI-compatible model on port $2, working in dir $1; sets
# `nginx_pid`.
start_fake_model() {
    local work=$1 port=$2 here
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    mkdir -p "$work/logs"
    sed "s/FAKE_PORT/$port/" "$here/fake-model.nginx.conf" >"$work/nginx.conf"
    "$nginx_bin" -c "$work/nginx.conf" -p "$work" -g "pid $work/nginx.pid; daemon off;" &
    nginx_pid=$!
}

# Writes to $1 a `turnstile serve` config whose model is the fake model on port $2, with
# durability $3 and env STORAGE_EXTRA (more `[storage]` lines, e.g. "compression = false").
write_fake_model_config() {
    cat >"$1" <<TOML
[model]
provider = "openai"
base_url = "http://127.0.0.1:$2/v1"
model = "fake-model"
[storage]
durability = "$3"
${STORAGE_EXTRA:-}
TOML
}

# The single-server harness of `http_turns.sh`, `http_ab.sh` and `http_profile.sh`: a work dir
# removed on exit, nginx as the fake model, and a `turnstile serve` config with durability $1.
# Sets `work`, `port`, `server_pid`; the scripts' `here` must be set.
start_single_server_harness() {
    work=$(mktemp -d)
    port=17990
    local fake_port=18801
    nginx_pid=""
    server_pid=""
    trap stop_single_server_harness EXIT
    start_fake_model "$work" "$fake_port"
    write_fake_model_config "$work/turnstile.toml" "$fake_port" "$1"
}

stop_single_server_harness() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    [ -n "$nginx_pid" ] && kill "$nginx_pid" 2>/dev/null
    rm -rf "$work"
}

# wrk driving POST /v1/chat/completions over $SESSIONS (1000) sessions with $1 connections
# for $2 seconds; prints wrk's output (its last line: `JSON {...}`).
drive_chat() {
    SESSIONS=${SESSIONS:-1000} wrk -t1 -c"$1" -d"$2" -s "$here/http/chat.lua" "http://127.0.0.1:$port"
}

# Starts `turnstile serve` on a fresh data dir, run as the command in "$@" (the binary, or a
# wrapper such as valgrind followed by it), and waits up to 60 s until it is ready; sets
# `server_pid`.
launch_turnstile() {
    rm -rf "$work/data"
    OPENAI_API_KEY=bench RUST_LOG=warn "$@" serve --config "$work/turnstile.toml" \
        --data-dir "$work/data" --listen "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 600); do
        curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
        sleep 0.1
    done
}

# Starts binary $1 on a fresh data dir and warms it up with $2 connections for 3 s (every
# session exists and the model connection pool is open); sets `server_pid`.
start_turnstile() {
    launch_turnstile "$1"
    drive_chat "$2" 3s >/dev/null
}

stop_turnstile() { kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""; }

# One measured run of binary $1 with $2 connections for $3 seconds, on a fresh server: sets
# `run_result` to "turns/s p50_ms p99_ms cpu_us_per_turn non2xx" (CPU = the server's utime +
# stime ÷ turns). Not called in a subshell, so the exit trap still knows the server.
measure_run() {
    local t0 t1 out
    start_turnstile "$1" "$2"
    t0=$(awk '{print $14 + $15}' "/proc/$server_pid/stat")
    out=$(drive_chat "$2" "$3s")
    t1=$(awk '{print $14 + $15}' "/proc/$server_pid/stat")
    stop_turnstile
    run_result=$(python3 -c '
import json, os, sys
r = json.loads(sys.argv[1])
ok = r["requests"] - r["non2xx"]
cpu_us = (int(sys.argv[2]) - int(sys.argv[3])) / os.sysconf("SC_CLK_TCK") / max(ok, 1) * 1e6
print("%.0f %.2f %.2f %.0f %d" % (ok / r["seconds"], r["p50_ms"], r["p99_ms"], cpu_us, r["non2xx"]))' \
        "$(grep '^JSON ' <<<"$out" | sed 's/^JSON //')" "$t1" "$t0")
}

# Syscalls and context switches per turn of binary $1 at $2 connections: a fresh server,
# `perf stat` on it for 4 s of a 7 s run; prints one line ("BIN turns/s=N name=per_turn ...").
count_switches() {
    local t0 t1 wrk_pid
    local events=futex,epoll_wait,writev,recvfrom,sched_yield,pwrite64,sync_file_range
    start_turnstile "$1" "$2"
    drive_chat "$2" 7s >/dev/null &
    wrk_pid=$!
    sleep 1
    t0=$(turns_so_far)
    perf stat -e "$(sed 's/\([a-z_0-9]*\)/syscalls:sys_enter_\1/g' <<<"$events"),context-switches,task-clock" \
        -p "$server_pid" -- sleep 4 2>"$work/stat.txt"
    t1=$(turns_so_far)
    wait "$wrk_pid"
    stop_turnstile
    python3 - "$t0" "$t1" "$work/stat.txt" "$1" <<'PY'
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
}

# Reads runs as lines of numbers on stdin and prints one markdown table row: the cells given
# before `--` as they are, then for each column spec `FORMAT[:UNIT]` after it the column's
# median and (min–max) in that printf format, followed by UNIT.
# Example: `median_row 16 -- %.0f %.2f:ms` prints `| 16 | 7127 (7024–7191) | 2.09 (2.08–2.13) ms |`.
median_row() {
    python3 -c '
import sys, statistics as st
args = sys.argv[1:]
cut = args.index("--")
cells, specs = args[:cut], args[cut + 1:]
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
for i, spec in enumerate(specs):
    fmt, _, unit = spec.partition(":")
    v = [r[i] for r in rows]
    cell = "%s (%s–%s)" % (fmt % st.median(v), fmt % min(v), fmt % max(v))
    cells.append(cell + (" " + unit if unit else ""))
print("| " + " | ".join(cells) + " |")' "$@"
}

# Turns the running server has finished so far (its /metrics).
turns_so_far() {
    curl -s "http://127.0.0.1:$port/metrics" | awk '/^turnstile_turns_total/ {s += $2} END {print s}'
}
