"""Streaming load: N concurrent streaming /v1/chat/completions clients against Turnstile in
front of a fake streaming model (first token after FIRST_MS, CHUNKS chunks, TOTAL_MS in all).

Measures, per client, the time to the first content chunk (TTFT) through Turnstile and, with the
same client code, directly against the fake model; the overhead is the difference per
percentile. Also the server's RSS growth while every turn is in flight, per turn.
Pure standard library (asyncio), so it runs wherever python3 does.

Usage: streaming_bench.py BINARY [CLIENTS]
"""

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

FIRST_MS = 100
CHUNKS = 40
TOTAL_MS = 2000
HOST = "127.0.0.1"


# ------------------------------------------------------------------------------------------
# The fake model: an OpenAI-compatible streaming server.


# Connection handlers of the fake model, cancelled and awaited before the loop ends.
HANDLERS = set()


async def fake_model(reader, writer):
    HANDLERS.add(asyncio.current_task())
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            body = json.loads(await reader.readexactly(length)) if length else {}
            await stream_answer(writer, body.get("stream", False))
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()
        HANDLERS.discard(asyncio.current_task())


def chunk(delta, finish=None):
    return {
        "id": "fake",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


async def stream_answer(writer, stream):
    if not stream:
        await asyncio.sleep(TOTAL_MS / 1000)
        body = json.dumps({
            "id": "fake", "object": "chat.completion", "created": 1, "model": "fake-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "w " * CHUNKS},
                         "finish_reason": "stop"}],
        }).encode()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        await writer.drain()
        return
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                 b"transfer-encoding: chunked\r\n\r\n")
    start = time.monotonic()
    gap = (TOTAL_MS - FIRST_MS) / 1000 / (CHUNKS - 1)

    def send(payload):
        data = f"data: {payload}\n\n".encode()
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    await asyncio.sleep(FIRST_MS / 1000)
    for i in range(CHUNKS):
        target = start + FIRST_MS / 1000 + i * gap
        delay = target - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        send(json.dumps(chunk({"content": "w "})))
        await writer.drain()
    send(json.dumps(chunk({}, "stop")))
    send("[DONE]")
    writer.write(b"0\r\n\r\n")
    await writer.drain()


# ------------------------------------------------------------------------------------------
# The client: one streaming request, timing the first content chunk.


async def one_client(port, path, user):
    body = json.dumps({
        "model": "fake-model", "user": user, "stream": True,
        "messages": [{"role": "user", "content": "hello"}],
    }).encode()
    reader, writer = await asyncio.open_connection(HOST, port)
    start = time.monotonic()
    writer.write(f"POST {path} HTTP/1.1\r\nhost: {HOST}\r\ncontent-type: application/json\r\n"
                 f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode() + body)
    await writer.drain()
    ttft = None
    done = False
    buf = b""
    while True:
        data = await reader.read(65536)
        if not data:
            break
        buf += data
        if ttft is None and b'"content"' in buf:
            ttft = time.monotonic() - start
        if b"[DONE]" in buf:
            done = True
            break
        if ttft is not None:
            buf = buf[-16:]
    writer.close()
    return ttft, done


async def run_clients(port, path, n, prefix):
    results = await asyncio.gather(
        *(one_client(port, path, f"{prefix}-{i}") for i in range(n)), return_exceptions=True
    )
    ttfts = [r[0] * 1000 for r in results if isinstance(r, tuple) and r[0] is not None]
    answered = sum(1 for r in results if isinstance(r, tuple) and r[1])
    errors = [r for r in results if isinstance(r, Exception)]
    return ttfts, answered, errors


def pct(values, p):
    values = sorted(values)
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def main():
    binary = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    model_server = await asyncio.start_server(fake_model, HOST, 0, backlog=4096)
    model_port = model_server.sockets[0].getsockname()[1]

    # The model's own TTFT, measured by the same client code.
    direct, direct_ok, direct_err = await run_clients(model_port, "/v1/chat/completions", n, "d")

    with tempfile.TemporaryDirectory(prefix="turnstile-stream-bench-") as dir:
        config = os.path.join(dir, "turnstile.toml")
        with open(config, "w") as f:
            f.write(f"""
[server]
listen = "{HOST}:0"
max_connections = {n + 256}
reply_timeout_ms = 60000
[storage]
data_dir = "{dir}/data"
durability = "batched"
[lanes]
max_concurrent_turns = {n + 64}
[model]
provider = "openai"
base_url = "http://{HOST}:{model_port}/v1"
model = "fake-model"
max_retries = 0
""")
        sock = __import__("socket").socket()
        sock.bind((HOST, 0))
        port = sock.getsockname()[1]
        sock.close()
        proc = subprocess.Popen(
            [binary, "serve", "--config", config, "--listen", f"{HOST}:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": "warn", "OPENAI_API_KEY": "unused"},
        )
        try:
            for _ in range(500):
                try:
                    r, w = await asyncio.open_connection(HOST, port)
                    w.write(b"GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                    await w.drain()
                    if b"200" in (await r.read(100)):
                        w.close()
                        break
                    w.close()
                except OSError:
                    pass
                await asyncio.sleep(0.02)
            # Warm-up: one turn, so lazily built state is not counted per turn.
            await run_clients(port, "/v1/chat/completions", 1, "warm")
            base_rss = rss_kib(proc.pid)
            peak = [base_rss]

            async def sample():
                while True:
                    peak[0] = max(peak[0], rss_kib(proc.pid))
                    await asyncio.sleep(0.05)

            sampler = asyncio.create_task(sample())
            through, ok, errors = await run_clients(port, "/v1/chat/completions", n, "t")
            sampler.cancel()
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    model_server.close()
    for task in list(HANDLERS):
        task.cancel()
    await asyncio.gather(*HANDLERS, return_exceptions=True)

    print(f"clients {n}; model: first token {FIRST_MS} ms, {CHUNKS} chunks, {TOTAL_MS} ms")
    print(f"direct to the model:  answered {direct_ok}/{n}, errors {len(direct_err)}, "
          f"TTFT p50 {pct(direct, 50):.1f} ms p99 {pct(direct, 99):.1f} ms")
    print(f"through turnstile:    answered {ok}/{n}, errors {len(errors)}, "
          f"TTFT p50 {pct(through, 50):.1f} ms p99 {pct(through, 99):.1f} ms")
    print(f"TTFT overhead:        p50 {pct(through, 50) - pct(direct, 50):.1f} ms, "
          f"p99 {pct(through, 99) - pct(direct, 99):.1f} ms")
    grew = peak[0] - base_rss
    print(f"RSS: {base_rss} KiB idle, {peak[0]} KiB peak, {grew / max(n, 1):.1f} KiB per in-flight turn")
    if errors:
        print("first error:", repr(errors[0]))
    if ok < n:
        sys.exit(1)


if __name__ == "__main__":
    asyncio.run(main())
