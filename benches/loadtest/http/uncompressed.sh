#!/usr/bin/env bash
# A "binary" for the HTTP harness (`http_interleave.sh`, `http_ab.sh`): runs $TURNSTILE_BIN
# with `[storage] compression = false` appended to the config the harness wrote (which ends
# with its [storage] table), to compare a build with and without compressed pages in one
# sitting. Usage: TURNSTILE_BIN=target/release/turnstile http_interleave.sh A path/to/this.sh
set -euo pipefail
bin=${TURNSTILE_BIN:?set TURNSTILE_BIN to the turnstile binary}
args=("$@")
for i in "${!args[@]}"; do
    if [ "${args[$i]}" = --config ]; then
        plain="${args[$((i + 1))]}.uncompressed"
        { cat "${args[$((i + 1))]}"; echo 'compression = false'; } >"$plain"
        args[$((i + 1))]=$plain
    fi
done
exec "$bin" "${args[@]}"
