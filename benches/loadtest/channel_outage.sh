#!/usr/bin/env bash
# The issue's figure "messages caught up after a 30 s outage, duplicates: 0", for Discord and
# Slack (tests/it/channel_outage.rs, `#[ignore]`d): the real binary (debug build) behind the
# fake Discord / fake Slack (test doubles on loopback) and a recording fake model, warmed up
# on 8 conversations (4 channels and a thread in each), killed with `kill -9`, kept down for
# OUTAGE_S seconds while addressed user messages arrive at RATE_PER_S, round-robin over the 8
# conversations (at 2/s for 30 s: 60, and 10 more in the 5 s after the restart: at most 9 per
# conversation, under `[queue] cap` 20 and the catch-up bounds), restarted. Prints,
# per channel: sent during the outage, caught up (answered), sent after the restart and
# answered, duplicates, missing, restart -> first answer and -> last catch-up answer, and the
# channel's counters from /metrics. Discord runs twice: its gateway session resumed after the
# restart (the fake gateway replays the outage's events, as Discord does while a session is
# resumable) and refused (op 9: the outage is read back over REST). Fails when anything is
# missing or answered twice.
# Usage: benches/loadtest/channel_outage.sh [discord|slack]...   (default both; env OUTAGE_S
#        30, RATE_PER_S 2, CARGO_TARGET_DIR as usual)
set -euo pipefail
cd "$(dirname "$0")/../.."
export OUTAGE_S=${OUTAGE_S:-30}
export RATE_PER_S=${RATE_PER_S:-2}
channels=("$@")
[ ${#channels[@]} -gt 0 ] || channels=(discord slack)
for channel in "${channels[@]}"; do
    cargo test --locked --all-features --test it "channel_outage::${channel}_outage" \
        -- --ignored --nocapture --test-threads 1
done
