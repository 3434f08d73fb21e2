"""What one live slow stream holds in the proxy's process, by allocation site (issue 17).

The server under test (the bare pass-through of ``proxy.py`` or ``unbroken.proxy`` on a memory,
SQLite or Redis journal) runs under uvicorn in this process with ``tracemalloc`` on; the paced
upstream (``proxy.py serve paced``) and the clients holding the streams run in other processes,
so only the server's allocations are counted. A warm-up of a few streams run to their end first
allocates what any stream allocates once; then a snapshot, then ``--streams`` slow streams
(``--rate`` frames/s, 2 by default, read on by their clients) are opened and held, a second
snapshot is taken after ``--hold`` seconds, and the difference is reported per live stream: in
total and by the allocation sites that hold the most.

    .venv/bin/python benchmarks/proxy_memory.py --server proxy --store sqlite --streams 500
    .venv/bin/python benchmarks/proxy_memory.py --server passthrough --streams 500

``tracemalloc`` counts the Python heap only (not the C library's buffers, nor the allocator's
slack that RSS also shows), so its figure is below ``proxy.py --scenario load``'s RSS figure.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script, from anywhere
from benchmarks.processes import free_port
from benchmarks.proxy import BODY, CHAT, SENT, paced_streams


async def hold_streams(base: str, streams: int, rate: float,
                       frames: int) -> list[asyncio.StreamWriter]:
    """Open ``streams`` paced streams, 50 at a time, each read on as it flows (as a client
    does: the proxy's memory is measured, not a socket backlog); return once each sent its
    first frame."""
    host, port = base.removeprefix("http://").split(":")
    request = (f"POST {CHAT} HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer sk-bench\r\n"
               f"content-type: application/json\r\nx-frames: {frames}\r\nx-rate: {rate:g}\r\n"
               f"content-length: {len(BODY)}\r\nconnection: close\r\n\r\n{BODY}").encode()

    async def drain(reader: asyncio.StreamReader) -> None:
        while await reader.read(2**16):
            pass

    async def one() -> asyncio.StreamWriter:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(request)
        seen = b""
        while not SENT.search(seen):
            chunk = await asyncio.wait_for(reader.read(2**16), timeout=30)
            if not chunk:
                raise RuntimeError(f"{base}: a held stream closed: {seen[:200]!r}")
            seen += chunk
        readers.add(asyncio.ensure_future(drain(reader)))
        return writer

    readers: set[asyncio.Future[None]] = set()
    writers: list[asyncio.StreamWriter] = []
    for start_at in range(0, streams, 50):
        writers += await asyncio.gather(*(one() for _ in range(min(50, streams - start_at))))
    return writers


def hold(argv: list[str]) -> None:
    """Client process: open the streams, say ``ready``, hold them until stdin closes."""
    url, streams, rate, frames = argv[0], int(argv[1]), float(argv[2]), int(argv[3])

    async def run() -> None:
        await paced_streams(url, 8, 50.0, 20)
        print("warm", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        writers = await hold_streams(url, streams, rate, frames)
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        for writer in writers:
            writer.close()

    asyncio.run(run())


def app_for(options: argparse.Namespace, upstream: str, tmp: str) -> Any:
    if options.server == "passthrough":
        from benchmarks.proxy import passthrough_app

        return passthrough_app(upstream)
    from unbroken.proxy import ProxyConfig, create_app
    from unbroken.proxy.config import PROVIDERS

    store = {"memory": "memory://", "sqlite": f"sqlite:///{tmp}/journal.db",
             "redis": options.redis}[options.store]
    return create_app(ProxyConfig(origins=dict.fromkeys(PROVIDERS, upstream), store=store))


async def measure(options: argparse.Namespace) -> None:
    import uvicorn

    upstream_port, port = free_port(), free_port()
    here = str(Path(__file__).resolve().parent)
    paced = subprocess.Popen([sys.executable, f"{here}/proxy.py", "serve", "paced", "--port",
                              str(upstream_port), "--loop", "asyncio"])
    with tempfile.TemporaryDirectory() as tmp:
        app = app_for(options, f"http://127.0.0.1:{upstream_port}", tmp)
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, loop="asyncio",
                                               http="h11" if options.h11 else "auto",
                                               log_level="warning", access_log=False))
        serving = asyncio.create_task(server.serve())
        while not server.started:
            if serving.done():
                raise RuntimeError("the server did not start") from serving.exception()
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # the paced upstream starts
        client = subprocess.Popen([sys.executable, __file__, "hold", f"http://127.0.0.1:{port}",
                                   str(options.streams), str(options.rate),
                                   str(options.frames)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert client.stdin is not None and client.stdout is not None
        loop = asyncio.get_running_loop()
        try:
            tracemalloc.start(options.depth)
            assert await loop.run_in_executor(None, client.stdout.readline) == "warm\n"
            await asyncio.sleep(0.5)
            gc.collect()
            before = tracemalloc.take_snapshot()
            client.stdin.write("go\n")
            client.stdin.flush()
            assert await loop.run_in_executor(None, client.stdout.readline) == "ready\n"
            await asyncio.sleep(options.hold)
            gc.collect()
            after = tracemalloc.take_snapshot()
            tracemalloc.stop()
        finally:
            client.kill()
            paced.kill()
            server.should_exit = True
            await asyncio.wait([serving], timeout=5)  # a live stream may hold the shutdown
    n = options.streams
    diff = after.compare_to(before, "traceback" if options.traceback else "lineno")
    total = sum(stat.size_diff for stat in diff)
    label = options.server if options.server == "passthrough" else f"proxy {options.store}"
    print(f"{label}: {total / n / 1024:.2f} KiB per live stream (tracemalloc, {n} streams, "
          f"at {options.rate:g} frames/s, held {options.hold:g} s)")
    for stat in sorted(diff, key=lambda s: -s.size_diff)[: options.top]:
        if stat.size_diff / n < 16:
            break
        frames = stat.traceback.format() if options.traceback else [str(stat.traceback[0])]
        print(f"  {stat.size_diff / n:8.0f} B/stream {stat.count_diff / n:6.1f} blocks  "
              + "\n      ".join(line.strip() for line in frames[-options.lines:]))


def main() -> None:
    if sys.argv[1:2] == ["hold"]:
        hold(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=("proxy", "passthrough"), default="proxy")
    parser.add_argument("--store", choices=("memory", "sqlite", "redis"), default="sqlite")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--hold", type=float, default=2.0,
                        help="seconds the streams flow after the last one opened")
    parser.add_argument("--rate", type=float, default=2.0, help="frames/s of a held stream")
    parser.add_argument("--frames", type=int, default=60, help="frames of a held stream")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--depth", type=int, default=1)
    parser.add_argument("--traceback", action="store_true", help="group by whole traceback")
    parser.add_argument("--lines", type=int, default=1)
    parser.add_argument("--h11", action="store_true")
    options = parser.parse_args()
    started = time.monotonic()
    asyncio.run(measure(options))
    print(f"({time.monotonic() - started:.0f} s)", flush=True)
    os._exit(0)  # the proxy's producers are not waited for


if __name__ == "__main__":
    main()
