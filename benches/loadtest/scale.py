#!/usr/bin/env python3
"""Storage at scale (issue 39): fill a data dir with many small sessions in process, then serve
it and watch what the idle server does to it.

  scale.py BIN DIR --sessions N --messages M [--budget BYTES] [--idle-s 90] [--port 7993]
           [--fill-uncompressed]

1. `BIN loadtest --in-process` writes N sessions x M messages into DIR (a fresh dir) on the
   embedded defaults (or with `max_disk_bytes = BUDGET`).
2. `BIN serve` on DIR: time to the first 200 from /readyz, RSS, `/v1/stats` and `/metrics`
   times (median of 5), the data dir against the encoded transcript bytes.
3. For IDLE_S seconds a prober posts a message every 100 ms to a session of its own (ack
   latency: worst and p99; refusals by status), while the server's janitor does what it does.
4. 2,000 of the N sessions, spread evenly, are read back (`GET /v1/sessions/{key}`): how many
   are gone. The server's own log gives rewrite pauses and janitor passes.
With --fill-uncompressed the fill writes `compression = false` (a data dir as an older version
left it) and the server runs on the default, so step 3 measures the copy into a compressed
database while the prober posts.
Every loop is bounded; the server is stopped at the end.
"""
import argparse, json, os, re, subprocess, sys, time, urllib.request, urllib.error, statistics


def du(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return total


def get(url, timeout=30):
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=timeout) as r:
        body = r.read()
        return r.status, body, time.perf_counter() - t


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("dir")
    ap.add_argument("--sessions", type=int, required=True)
    ap.add_argument("--messages", type=int, default=1)
    ap.add_argument("--budget", type=int)
    ap.add_argument("--fill-uncompressed", action="store_true")
    ap.add_argument("--idle-s", type=float, default=90)
    ap.add_argument("--port", type=int, default=7993)
    ap.add_argument("--concurrency", type=int, default=256)
    a = ap.parse_args()
    if os.path.exists(a.dir) and os.listdir(a.dir):
        sys.exit(f"{a.dir} is not empty")
    os.makedirs(a.dir, exist_ok=True)
    cfg = os.path.join(a.dir, "..", os.path.basename(a.dir.rstrip("/")) + ".toml")
    with open(cfg, "w") as f:
        f.write("[storage]\n")
        if a.budget:
            f.write(f"max_disk_bytes = {a.budget}\n")
    fill_cfg = cfg
    if a.fill_uncompressed:
        fill_cfg = cfg[:-len(".toml")] + "-fill.toml"
        with open(cfg) as src, open(fill_cfg, "w") as f:
            f.write(src.read() + "compression = false\n")
    out = {"sessions": a.sessions, "messages": a.messages, "budget": a.budget or "default",
           "fill_uncompressed": a.fill_uncompressed}

    t = time.perf_counter()
    fill = subprocess.run([a.bin, "loadtest", "--in-process", "--data-dir", a.dir, "--config", fill_cfg,
                           "--sessions", str(a.sessions), "--messages", str(a.messages),
                           "--concurrency", str(a.concurrency), "--max-seconds", "7200",
                           "--drain-seconds", "600"],
                          capture_output=True, text=True)
    fill_s = time.perf_counter() - t
    if fill.returncode != 0:
        sys.exit("loadtest failed:\n" + fill.stderr[-3000:])
    out["fill_s"] = round(fill_s, 1)
    out["fill_msgs_per_s"] = round(a.sessions * a.messages / fill_s)
    out["fill_log_evictions"] = len(re.findall(r"janitor pass|evicted session|moved session", fill.stderr))
    out["fill_report"] = [l.strip() for l in fill.stdout.splitlines() if l.startswith(("messages", "errors", "rss"))]
    out["data_dir_after_fill"] = du(a.dir)

    log = open(os.path.join(a.dir, "..", "scale-serve.log"), "w")
    env = dict(os.environ, NO_COLOR="1")
    start = time.perf_counter()
    srv = subprocess.Popen([a.bin, "serve", "--config", cfg, "--data-dir", a.dir,
                            "--listen", f"127.0.0.1:{a.port}"], stdout=log, stderr=log, env=env)
    base = f"http://127.0.0.1:{a.port}"
    try:
        for _ in range(6000):
            try:
                if get(base + "/readyz", timeout=1)[0] == 200:
                    break
            except Exception:
                time.sleep(0.01)
        else:
            sys.exit("not ready after 60 s")
        out["readyz_ms"] = round((time.perf_counter() - start) * 1000)
        # The start-up checks set the store's totals: wait for them (bounded).
        for _ in range(600):
            if json.loads(get(base + "/v1/stats")[1]).get("sessions"):
                break
            time.sleep(0.1)
        out["totals_ready_ms"] = round((time.perf_counter() - start) * 1000)
        stats_t, metrics_t = [], []
        for _ in range(5):
            _, body, dt = get(base + "/v1/stats")
            stats_t.append(dt * 1000)
            _, _, dt = get(base + "/metrics")
            metrics_t.append(dt * 1000)
        stats = json.loads(body)
        out["stats_ms_median"] = round(statistics.median(stats_t), 2)
        out["metrics_ms_median"] = round(statistics.median(metrics_t), 2)
        out["stats_sessions"] = stats.get("sessions")
        out["transcript_bytes"] = stats.get("transcript_bytes")
        out["rss_mib_ready"] = round(rss_kib(srv.pid) / 1024, 1)

        # The prober: one message every 100 ms, each acknowledged or refused.
        acks, refused, t_end, i = [], {}, time.perf_counter() + a.idle_s, 0
        while time.perf_counter() < t_end and i < 100_000:
            i += 1
            msg = {"channel": "webhook", "account_id": "default", "chat_kind": "direct",
                   "chat_id": "prober", "message_id": f"probe-{i}-{time.time_ns()}",
                   "sender": {"id": "prober", "name": "Prober", "is_bot": False},
                   "text": f"probe {i}", "mentioned_bot": True, "timestamp_ms": int(time.time() * 1000)}
            req = urllib.request.Request(base + "/v1/messages", data=json.dumps(msg).encode(),
                                         headers={"content-type": "application/json"})
            t = time.perf_counter()
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    r.read()
                    acks.append((time.perf_counter() - t) * 1000)
            except urllib.error.HTTPError as e:
                refused[e.code] = refused.get(e.code, 0) + 1
            except Exception as e:
                refused[type(e).__name__] = refused.get(type(e).__name__, 0) + 1
            time.sleep(max(0.0, 0.1 - (time.perf_counter() - t)))
        acks.sort()
        out["probe_acks"] = len(acks)
        out["probe_refused"] = refused
        out["probe_ack_ms_max"] = round(acks[-1], 1) if acks else None
        out["probe_ack_ms_p99"] = round(acks[int(len(acks) * 0.99) - 1], 1) if acks else None

        step = max(1, a.sessions // 2000)
        gone = 0
        sample = range(0, a.sessions, step)
        for s in sample:
            key = f"agent:main:loadtest:group:chat-{s}"
            try:
                get(f"{base}/v1/sessions/{key}")
            except urllib.error.HTTPError as e:
                if e.code == 404:
                    gone += 1
        out["sampled"] = len(sample)
        out["sampled_gone"] = gone
        _, body, _ = get(base + "/v1/stats")
        stats = json.loads(body)
        out["data_dir_end"] = du(a.dir)
        out["stats_disk_bytes_end"] = stats.get("disk_bytes")
        out["max_disk_bytes"] = stats.get("max_disk_bytes")
        out["high_water_bytes"] = stats.get("high_water_bytes")
        j = stats.get("janitor") or {}
        out["janitor"] = {k: j.get(k) for k in ("passes", "sessions_frozen_total", "cold_deleted_total", "bytes_freed_total")}
        out["evictions"] = stats.get("evictions")
        out["rss_mib_end"] = round(rss_kib(srv.pid) / 1024, 1)
        if out.get("transcript_bytes"):
            out["disk_per_transcript_byte"] = round(out["data_dir_end"] / out["transcript_bytes"], 2)
    finally:
        srv.terminate()
        try:
            srv.wait(timeout=20)
        except subprocess.TimeoutExpired:
            srv.kill()
        log.close()
    text = open(os.path.join(a.dir, "..", "scale-serve.log")).read()
    pauses = [int(p) for p in re.findall(r"pause_ms=(\d+)", text)]
    out["rewrites"] = len(re.findall(r"database rewritten", text))
    out["rewrites_given_up"] = len(re.findall(r"rewrite given up", text))
    out["rewrite_pause_ms_max"] = max(pauses) if pauses else None
    out["ansi_in_log"] = "\x1b[" in text
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
