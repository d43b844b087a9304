#!/usr/bin/env bash
# Time from starting `turnstile serve` on an existing data dir to the first 200 from /readyz.
# Usage: benches/loadtest/cold_start.sh BINARY DATA_DIR [PORT]
set -euo pipefail
bin=$1 dir=$2 port=${3:-7991}
start=$(date +%s%N)
"$bin" serve --data-dir "$dir" --listen "127.0.0.1:$port" >/dev/null 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 2000); do
    if curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; then
        echo "readyz after $(( ($(date +%s%N) - start) / 1000000 )) ms; RSS $(awk '/VmRSS/{print $2}' /proc/$pid/status) KiB"
        exit 0
    fi
    sleep 0.005
done
echo "not ready after 10 s" >&2
exit 1
