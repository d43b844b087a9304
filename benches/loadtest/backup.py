#!/usr/bin/env python3
"""Online backup at scale (issue 44): how long a backup of a running server takes, and how long
writers wait for it.

  backup.py BIN DIR --sessions N [--messages 1] [--port 7994]

1. `BIN loadtest --in-process` writes N sessions x M messages into DIR (a fresh dir) on the
   embedded defaults.
2. `BIN serve` on DIR; a prober posts a message every 20 ms to a session of its own and times
   each acknowledgement, before and during the backup.
3. `BIN backup --url ... --to DIR.backup`: its wall time and size; the server's log gives the
   pause under the write gate (`pause_ms`). The prober's worst acknowledgement during the
   backup is the longest write pause a client saw.
4. `BIN restore` into DIR.restored (time), and one session read back from a server on it.
Every loop is bounded; the servers are stopped at the end.
"""
import argparse, json, os, re, subprocess, sys, threading, time, urllib.request


def post(url, body, timeout=30):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=timeout) as r:
        r.read()
        return r.status, time.perf_counter() - t


def wait_ready(base, proc, limit_s=300):
    deadline = time.time() + limit_s
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit("the server exited")
        try:
            with urllib.request.urlopen(base + "/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.05)
    sys.exit("not ready")


class Prober(threading.Thread):
    def __init__(self, base):
        super().__init__(daemon=True)
        self.base, self.samples, self.stop, self.errors = base, [], False, 0

    def run(self):
        n = 0
        while not self.stop and n < 1_000_000:
            msg = {"channel": "telegram", "account_id": "default", "chat_kind": "group",
                   "chat_id": "backup-prober", "message_id": f"p{n}",
                   "sender": {"id": "111", "name": "Prober", "is_bot": False},
                   "text": f"probe {n}", "mentioned_bot": True, "timestamp_ms": 0}
            t0 = time.time()
            try:
                _, dt = post(self.base + "/v1/messages", msg)
                self.samples.append((t0, dt))
            except Exception:
                self.errors += 1
            n += 1
            time.sleep(0.02)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("dir")
    ap.add_argument("--sessions", type=int, required=True)
    ap.add_argument("--messages", type=int, default=1)
    ap.add_argument("--port", type=int, default=7994)
    a = ap.parse_args()
    if os.path.exists(a.dir) and os.listdir(a.dir):
        sys.exit(f"{a.dir} is not empty")
    out = {"sessions": a.sessions, "messages": a.messages}
    t = time.perf_counter()
    fill = subprocess.run([a.bin, "loadtest", "--in-process", "--data-dir", a.dir,
                           "--sessions", str(a.sessions), "--messages", str(a.messages),
                           "--concurrency", "256", "--max-seconds", "7200",
                           "--drain-seconds", "600"], capture_output=True, text=True)
    if fill.returncode != 0:
        sys.exit("loadtest failed:\n" + fill.stderr[-3000:])
    out["fill_s"] = round(time.perf_counter() - t, 1)

    base = f"http://127.0.0.1:{a.port}"
    log = open(a.dir.rstrip("/") + ".serve.log", "w")
    server = subprocess.Popen([a.bin, "serve", "--data-dir", a.dir, "--listen", f"127.0.0.1:{a.port}"],
                              stdout=subprocess.DEVNULL, stderr=log)
    backup = a.dir.rstrip("/") + ".backup"
    try:
        wait_ready(base, server)
        time.sleep(5)  # the deferred start-up checks
        prober = Prober(base)
        prober.start()
        time.sleep(3)
        t0 = time.time()
        done = subprocess.run([a.bin, "backup", "--url", base, "--to", backup],
                              capture_output=True, text=True)
        t1 = time.time()
        time.sleep(1)
        prober.stop = True
        prober.join(30)
        if done.returncode != 0:
            sys.exit("backup failed:\n" + done.stderr[-3000:])
        out["backup_s"] = round(t1 - t0, 2)
        out["backup_bytes"] = os.path.getsize(backup)
        before = [dt for (s, dt) in prober.samples if s < t0]
        during = [dt for (s, dt) in prober.samples if t0 <= s <= t1]
        out["ack_ms_before_max"] = round(max(before) * 1000, 1) if before else None
        out["ack_ms_during_max"] = round(max(during) * 1000, 1) if during else None
        out["acks_during"] = len(during)
        out["prober_errors"] = prober.errors
    finally:
        server.terminate()
        server.wait(60)
        log.close()
    text = open(a.dir.rstrip("/") + ".serve.log").read()
    out["server_pause_ms"] = [int(m) for m in re.findall(r"pause_ms: (\d+)", text)]
    restored = a.dir.rstrip("/") + ".restored"
    t = time.perf_counter()
    r = subprocess.run([a.bin, "restore", "--from", backup, "--data-dir", restored],
                       capture_output=True, text=True)
    out["restore_s"] = round(time.perf_counter() - t, 2)
    out["restore_ok"] = r.returncode == 0 and "problems found: 0" in r.stdout
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
