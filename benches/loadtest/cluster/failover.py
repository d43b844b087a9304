"""Failover driver for `../cluster.sh`: a steady trickle of turns, then one node SIGKILLed.

SESSIONS sessions each post one chat completion at a time (waiting for its reply, then
PAUSE seconds) to the surviving nodes in turn. After BEFORE seconds the victim is SIGKILLed;
the run goes on until every session has had a reply to a message sent after the kill, and
AFTER seconds more (at most PATIENCE seconds after the kill). The sessions the victim owned
(partition = CRC-32/IEEE of the session key modulo PARTITIONS, owners read from `turnstile
cluster status --json` just before the kill) stall until their partitions are taken over:
per session, the failover time is from the kill to the end of its longest wait for a reply
after the kill. Afterwards every session's transcript is read from a survivor to check that
each message that got a 200 is in it once and answered once.

Prints one line: FAILOVER {json}.
"""

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import zlib


def session_key(user):
    # `user_session_key` keeps lower-case ASCII letters and digits as they are; the
    # OpenAI-compatible endpoint's sessions are keyed by the user name itself.
    return user


# Tries at reading the owners: under load a status read can time out.
STATUS_ATTEMPTS = 5


def owners(binary, config):
    for attempt in range(1, STATUS_ATTEMPTS + 1):
        done = subprocess.run(
            [binary, "cluster", "status", "--config", config, "--json"],
            capture_output=True, text=True, timeout=30,
        )
        if done.returncode == 0:
            status = json.loads(done.stdout)
            return {p["partition"]: p["owner"] for p in status["partitions"]}
        print("cluster status failed (attempt %d): %s" % (attempt, done.stderr.strip()),
              file=sys.stderr, flush=True)
    raise SystemExit("cannot read the partitions' owners")


class Session(threading.Thread):
    def __init__(self, index, ports, args, clock):
        super().__init__(daemon=True)
        self.user = "f%s-%d" % (args.run, index)
        self.key = session_key(self.user)
        self.index = index
        self.ports = ports
        self.args = args
        self.clock = clock
        self.done = []  # (send time, completion time, http status)
        self.texts = []  # message texts that got a 200
        self.errors = []

    def run(self):
        conns = {}
        for n in range(self.args.max_per_session):
            if self.clock.stop.is_set():
                break
            port = self.ports[(self.index + n) % len(self.ports)]
            text = "%s says %d" % (self.user, n)
            body = json.dumps({
                "model": "fake-model",
                "user": self.user,
                "messages": [{"role": "user", "content": text}],
            })
            sent = time.monotonic()
            try:
                conn = conns.get(port)
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=self.args.patience)
                    conns[port] = conn
                conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException) as e:
                conns.pop(port, None)
                self.errors.append("%s: %s" % (type(e).__name__, e))
                status = 0
            now = time.monotonic()
            self.done.append((sent, now, status))
            if status == 200:
                self.texts.append(text)
            else:
                self.errors.append("HTTP %d" % status)
            time.sleep(self.args.pause)


class Clock:
    def __init__(self):
        self.stop = threading.Event()


def transcript(port, key):
    out, after = [], 0
    for _ in range(1000):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/v1/sessions/%s/transcript?after=%d&limit=500" % (key, after))
        response = conn.getresponse()
        body = response.read()
        conn.close()
        if response.status != 200:
            return None
        page = json.loads(body)
        if not page:
            break
        out += page
        after = page[-1]["seq"]
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ports", required=True, help="the survivors' HTTP ports, comma-separated")
    parser.add_argument("--victim-pid", type=int, required=True)
    parser.add_argument("--victim-id", required=True)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--config", required=True, help="a config with the [cluster] section")
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--sessions", type=int, default=30)
    parser.add_argument("--pause", type=float, default=0.05)
    parser.add_argument("--before", type=float, default=3.0)
    parser.add_argument("--after", type=float, default=1.0)
    parser.add_argument("--patience", type=float, default=60.0)
    parser.add_argument("--max-per-session", type=int, default=100000)
    parser.add_argument("--run", default="0")
    args = parser.parse_args()
    ports = [int(p) for p in args.ports.split(",")]

    clock = Clock()
    sessions = [Session(i, ports, args, clock) for i in range(args.sessions)]
    for s in sessions:
        s.start()
    time.sleep(args.before)
    held = owners(args.binary, args.config)
    moved = {s.key for s in sessions
             if held.get(zlib.crc32(s.key.encode()) % args.partitions) == args.victim_id}
    killed = time.monotonic()
    killed_at = time.time()
    os.kill(args.victim_pid, signal.SIGKILL)

    deadline = killed + args.patience
    while time.monotonic() < deadline:
        if all(any(sent > killed and st == 200 for sent, _, st in s.done) for s in sessions):
            break
        time.sleep(0.05)
    recovered = time.monotonic()
    time.sleep(max(0.0, min(args.after, deadline - time.monotonic())))
    clock.stop.set()
    for s in sessions:
        s.join(timeout=args.patience)

    def longest_wait(s):
        # The session's longest wait for a reply after the kill (counted from the kill at
        # the earliest), and when it ended: a moved session may still get a reply its old
        # owner committed just before dying, and stall on the next message.
        last, longest, end = killed, -1.0, None
        for _, t, st in s.done:
            if st != 200:
                continue
            if t > killed:
                if t - max(last, killed) > longest:
                    longest, end = t - max(last, killed), t
            last = t
        return None if end is None else (longest, end - killed)  # None: no reply after the kill

    moved_s, kept_s, unrecovered = [], [], []
    for s in sessions:
        wait = longest_wait(s)
        if wait is None:
            unrecovered.append(s.key)
        elif s.key in moved:
            moved_s.append(wait[1])  # kill -> the reply that ended its stall
        else:
            kept_s.append(wait[0])  # its longest wait: the survivors' own sessions go on

    # Answered once: each 200's message is in the transcript once; every user entry is
    # followed by exactly one assistant entry before the next user entry.
    missing = duplicated = unanswered = unreadable = 0
    for s in sessions:
        entries = transcript(ports[0], s.key)
        if entries is None:
            unreadable += 1
            continue
        users = [e.get("text") for e in entries if e.get("kind") == "user"]
        for text in s.texts:
            c = users.count(text)
            missing += c == 0
            duplicated += c > 1
        kinds = [e.get("kind") for e in entries if e.get("kind") in ("user", "assistant")]
        for a, b in zip(kinds, kinds[1:] + [None]):
            if a == "user" and b != "assistant":
                unanswered += 1
            if a == "assistant" and b == "assistant":
                duplicated += 1

    errors = {}
    for s in sessions:
        for e in s.errors:
            errors[e] = errors.get(e, 0) + 1
    result = {
        "sessions": len(sessions),
        "moved": len(moved),
        "killed_at": time.strftime("%H:%M:%S", time.gmtime(killed_at)) + ".%03d" % (killed_at % 1 * 1000),
        "moved_ms": sorted(round(f * 1000) for f in moved_s),
        "failover_max_ms": round(max(moved_s) * 1000) if moved_s else None,
        "failover_median_ms": round(statistics.median(moved_s) * 1000) if moved_s else None,
        "kept_longest_wait_ms": round(max(kept_s) * 1000) if kept_s else None,
        "all_recovered_ms": round((recovered - killed) * 1000),
        "unrecovered": len(unrecovered),
        "replies": sum(len(s.texts) for s in sessions),
        "errors": errors,
        "missing": missing,
        "duplicated": duplicated,
        "unanswered": unanswered,
        "unreadable": unreadable,
    }
    print("FAILOVER " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
