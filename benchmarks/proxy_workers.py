"""``unbroken proxy --workers N``: highest frames/s with 1 and with 2 workers, in one run.

The mock (``python -m unbroken.mock``) and ``unbroken proxy`` (SQLite journal in a temporary
directory) are processes of their own; this script is the load generator: openai-chat streams
of ``--tokens`` deltas at several concurrency levels, each frame counted, the best rate kept.
The proxy's CPU is its parent and workers' user + system time (``/proc``). The two proxies run
alternately, ``--rounds`` times each, so both see the same load from elsewhere.

On a 2-core machine the mock and this load generator share the cores with the workers: the
load generator (one Python process, httpx2) is the limit long before two workers are.

    python benchmarks/proxy_workers.py [--quick] [--tokens 400] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2

CHAT = "/v1/chat/completions"
BODY = '{"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]}'
AUTH = {"authorization": "Bearer sk-bench", "content-type": "application/json"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def process(*args: str, port: int) -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen([sys.executable, "-m", *args], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code in (
                        200, 404):
                    break
            except httpx2.TransportError:
                pass
            if child.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{args[0]} did not start")
            time.sleep(0.05)
        yield child
    finally:
        child.terminate()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its children now running."""
    pids = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    pids += [int(child) for child in children]
    ticks = 0
    for one in pids:
        try:
            fields = Path(f"/proc/{one}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


async def count_frames(client: httpx2.AsyncClient, url: str, headers: dict[str, str]) -> int:
    frames, last = 0, b""
    async with client.stream("POST", url, content=BODY, headers=headers) as response:
        async for chunk in response.aiter_raw():
            frames += chunk.count(b"\n\n") + (last == b"\n" and chunk[:1] == b"\n")
            last = chunk[-1:]
    return frames


async def throughput(base: str, streams: int, tokens: int) -> tuple[int, float]:
    headers = AUTH | {"unbroken-mock": f"seed=1; tokens={tokens}"}
    limits = httpx2.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx2.AsyncClient(timeout=120, limits=limits) as client:
        started = time.perf_counter()
        counts = await asyncio.gather(
            *(count_frames(client, base + CHAT, headers) for _ in range(streams)))
        elapsed = time.perf_counter() - started
    if any(count != tokens + 3 for count in counts):
        raise RuntimeError(f"frames {sorted(set(counts))}, expected {tokens + 3}")
    return sum(counts), elapsed


def best_rate(pid: int, mock: int, base: str, tokens: int,
              levels: tuple[int, ...]) -> tuple[float, float, float, float]:
    """The highest frames/s over the levels; at it, the CPU µs per frame of the proxy (all its
    processes), of the mock and of this load generator."""
    asyncio.run(throughput(base, 2, 50))  # connections and imports warm
    best = (0.0, 0.0, 0.0, 0.0)
    for streams in levels:
        cpu, upstream, here = cpu_seconds(pid), cpu_seconds(mock), time.process_time()
        frames, elapsed = asyncio.run(throughput(base, streams, tokens))
        rate = frames / elapsed
        if rate > best[0]:
            best = (rate, 1e6 * (cpu_seconds(pid) - cpu) / frames,
                    1e6 * (cpu_seconds(mock) - upstream) / frames,
                    1e6 * (time.process_time() - here) / frames)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs (a smoke test)")
    parser.add_argument("--tokens", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=2)
    options = parser.parse_args()
    tokens = 50 if options.quick else options.tokens
    levels = (4,) if options.quick else (8, 32, 64)
    mock_port = free_port()
    results: dict[int, list[tuple[float, float, float, float]]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as tmp, \
            process("unbroken.mock", "--port", str(mock_port), port=mock_port) as upstream:
        mock = f"http://127.0.0.1:{mock_port}"
        for _ in range(options.rounds):
            for workers in (1, 2):
                port = free_port()
                store = f"sqlite:///{tmp}/journal-{workers}.db"
                with process("unbroken.proxy", "--port", str(port), "--upstream", mock,
                             "--store", store, "--log-level", "warning", "--workers",
                             str(workers), port=port) as proxy:
                    results[workers].append(
                        best_rate(proxy.pid, upstream.pid, f"http://127.0.0.1:{port}", tokens,
                                  levels))
    print(f"{tokens} tokens per stream, concurrency {levels}, best of {options.rounds} rounds")
    print("| workers | highest frames/s | CPU µs per frame: proxy (all processes) | mock | "
          "load generator | cores busy in all |")
    print("|---|---|---|---|---|---|")
    for workers, runs in results.items():
        rate, cpu, mock_cpu, here = max(runs)
        print(f"| {workers} | {rate:,.0f} | {cpu:.1f} | {mock_cpu:.1f} | {here:.1f} | "
              f"{rate * (cpu + mock_cpu + here) / 1e6:.2f} |")
    print(f"2 workers / 1 worker: {max(results[2])[0] / max(results[1])[0]:.2f}x")


if __name__ == "__main__":
    main()
