#!/usr/bin/env python3
"""Samples per stage of a turn, from `perf script -F comm,tid,ip,sym --no-inline` output.

A sample belongs to the innermost stage whose marker appears on its stack (admission inside
the HTTP handler counts as admission); "sled" is the share of the stage's samples with sled
frames. Used by `http_profile.sh`. With `--within STAGE`, also the symbols that stage's samples
were in (the leaf frame) and the innermost Turnstile frame above them, each as a share of
the stage: `profile_stages.py OUT_DIR/stacks.txt --within "turn: assembly"`.
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


def main(path, within=None):
    counts, sled, total = collections.Counter(), collections.Counter(), 0
    leaves, ours = collections.Counter(), collections.Counter()
    frames = []

    def flush():
        nonlocal frames, total
        if frames:
            stage = stage_of(frames)
            counts[stage] += 1
            total += 1
            if any("sled::" in f for f in frames):
                sled[stage] += 1
            if stage == within:
                leaves[frames[0]] += 1
                ours[next((f for f in frames if "turnstile" in f), "?")] += 1
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
    if within:
        n = max(counts[within], 1)
        for title, counter in (("leaf symbol", leaves), ("innermost Turnstile frame", ours)):
            print(f"\n{within}: {title} (share of the stage)")
            for frame, k in counter.most_common(15):
                print(f"{100 * k / n:6.1f}%  {frame[:110]}")


if __name__ == "__main__":
    args = sys.argv[1:]
    stage = None
    if "--within" in args:
        i = args.index("--within")
        stage = args[i + 1]
        del args[i : i + 2]
    main(args[0], stage)
