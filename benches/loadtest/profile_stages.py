#!/usr/bin/env python3
"""Samples per stage of a turn, from `perf script -F comm,tid,ip,sym --no-inline` output.

A sample belongs to the innermost stage whose marker appears on its stack (admission inside
the HTTP handler counts as admission); "sled" is the share of the stage's samples with sled
frames. Used by `http_profile.sh`.
"""
import collections
import sys

# (stage, a substring of a frame that marks it), outermost first.
STAGES = [
    ("http: connection", "serve_connection"),
    ("http: chat handler", "chat_completions"),
    ("admission", "Admitter::admit"),
    ("lane", "Lane<B> as ractor"),
    ("turn (other)", "TurnEngine::run"),
    ("turn: assembly", "TurnEngine::assemble"),
    ("turn: model call", "OpenAiModel::run"),
    ("turn: delivery", "Delivery::deliver"),
    ("committer", "committer::run"),
    ("commit transaction", "commit_batch"),
    ("group-commit flusher", "GroupCommit"),
    ("sled I/O pool", "sled::threadpool::perform_work"),
    ("sled flusher", "sled::flusher::run"),
    ("reply hub", "ReplyHub"),
]


def stage_of(frames):
    found = "other (runtime, kernel, connections)"
    for frame in reversed(frames):  # root first
        for name, marker in STAGES:
            if marker in frame:
                found = name
    return found


def main(path):
    counts, sled, total = collections.Counter(), collections.Counter(), 0
    frames = []

    def flush():
        nonlocal frames, total
        if frames:
            stage = stage_of(frames)
            counts[stage] += 1
            total += 1
            if any("sled::" in f for f in frames):
                sled[stage] += 1
        frames = []

    for line in open(path, errors="replace"):
        if not line.strip() or not line[0].isspace():
            flush()
            continue
        parts = line.strip().split(None, 1)
        frames.append(parts[1] if len(parts) > 1 else "?")
    flush()
    print(f"{'stage':38s} {'samples':>8s} {'in sled':>8s}")
    for stage, n in counts.most_common():
        print(f"{stage:38s} {100 * n / total:7.1f}% {100 * sled[stage] / total:7.1f}%")


if __name__ == "__main__":
    main(sys.argv[1])
