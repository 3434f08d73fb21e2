"""``unbroken.server`` against a bare ``StreamingResponse`` and a hand-written Redis Streams +
``Last-Event-ID`` endpoint, at LLM speed: many concurrent streams, one frame per chunk.

    .venv/bin/python benchmarks/server.py [--levels 100,300,600] [--fps 40] [--frames 80]

Each server runs in its own process (``--serve VARIANT``) under uvicorn; this process is the
load: for each level, that many streams are started at once (staggered over one second), each
yielding ``--frames`` dicts ``--fps`` times a second, and read to the end. A frame carries the
time it was yielded, so the reader measures its delivery latency (from the later of that time
and the moment its response began: a frame yielded before is catch-up). Per variant and level:

- delivered frames/s, and whether the level was sustained (all frames arrived and p99 latency
  stayed under 250 ms); "max sustained" is the highest such level's rate;
- server CPU µs per frame (the server process's user+system time over the run; for the Redis
  variants redis-server's own CPU is shown apart);
- p50 / p99 delivery latency (the bare response's are the floor: "added" is the difference);
- resume: 200 reconnects with ``Last-Event-ID`` to ended streams, time to the first missed frame;
- memory per live stream: the server's RSS growth with ``--live`` streams live (default 1,000,
  idle between frames), divided by that count. Measured first, on a fresh server process, so
  memory freed by the load levels cannot be reused and hide the growth.

The machine is shared with other work: read the ratios of one run, not absolute numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]
from benchmarks.processes import cpu_seconds, free_port, percentile, rss_bytes  # noqa: E402

VARIANTS = ["bare", "memory", "sqlite", "redis", "handwritten-redis"]
SUSTAINED_P99_S = 0.25


# -- the servers ------------------------------------------------------------------------------

async def frames(n: int, interval: float) -> AsyncIterator[dict[str, Any]]:
    for i in range(1, n + 1):
        await asyncio.sleep(interval)
        yield {"t": time.time(), "i": i, "text": "a token of text "}


def serve(variant: str, port: int, store: str) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    routes: list[Route] = []
    lifespan: Any = None

    def params(request: Request) -> tuple[int, float]:
        q = request.query_params
        return int(q["n"]), 1.0 / float(q["fps"])

    if variant == "bare":
        async def bare(request: Request) -> Response:
            n, interval = params(request)

            async def body() -> AsyncIterator[bytes]:
                async for frame in frames(n, interval):
                    yield b"id: %d\ndata: %s\n\n" % (frame["i"], json.dumps(frame).encode())
                yield b"event: end\ndata: {}\n\n"

            return StreamingResponse(body(), media_type="text/event-stream")

        routes.append(Route("/stream", bare, methods=["GET"]))
    elif variant == "handwritten-redis":
        import redis.asyncio as aioredis

        # A pool as large as the readers: each one holds a connection in XREAD BLOCK.
        client = aioredis.from_url(store, max_connections=10_000)
        tasks: set[asyncio.Task[None]] = set()

        async def produce(key: str, n: int, interval: float) -> None:
            async for frame in frames(n, interval):
                await client.xadd(key, {"d": json.dumps(frame)})
            await client.xadd(key, {"end": "1"})
            await client.expire(key, 3600)

        async def start(request: Request) -> Response:
            n, interval = params(request)
            key = "hw:" + os.urandom(8).hex()
            task = asyncio.get_running_loop().create_task(produce(key, n, interval))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            return JSONResponse({"id": key})

        async def events(request: Request) -> Response:
            key = request.path_params["id"]
            last = request.headers.get("last-event-id", "0-0")

            async def body() -> AsyncIterator[bytes]:
                cursor = last
                while True:
                    got: Any = await client.xread({key: cursor}, block=15000, count=100)
                    if not got:
                        yield b": keep-alive\n\n"
                        continue
                    for entry_id, fields in got[0][1]:
                        cursor = entry_id.decode()
                        if b"end" in fields:
                            yield b"event: end\ndata: {}\n\n"
                            return
                        yield b"id: " + entry_id + b"\ndata: " + fields[b"d"] + b"\n\n"

            return StreamingResponse(body(), media_type="text/event-stream")

        routes += [Route("/start", start, methods=["POST"]),
                   Route("/s/{id}/events", events, methods=["GET"])]
    else:
        from unbroken.server import ResumableStreams

        streams = ResumableStreams(store, max_streams=None, max_streams_per_owner=None)
        lifespan = streams.lifespan

        async def ub_start(request: Request) -> Response:
            n, interval = params(request)
            handle = await streams.start(frames(n, interval), owner="bench")
            return JSONResponse({"id": handle.stream_id})

        async def ub_events(request: Request) -> Response:
            return streams.response(request.path_params["id"], request, owner="bench")

        routes += [Route("/start", ub_start, methods=["POST"]),
                   Route("/s/{id}/events", ub_events, methods=["GET"])]

    async def healthz(request: Request) -> Response:
        return JSONResponse({"pid": os.getpid()})

    routes.append(Route("/healthz", healthz, methods=["GET"]))
    app = Starlette(routes=routes, lifespan=lifespan)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", backlog=4096,
                timeout_keep_alive=60)


# -- the load ---------------------------------------------------------------------------------

async def open_stream(client: httpx2.AsyncClient, variant: str, n: int, fps: float) -> str:
    if variant == "bare":
        return f"/stream?n={n}&fps={fps}"
    started = await client.post(f"/start?n={n}&fps={fps}")
    return f"/s/{started.json()['id']}/events"


async def read_stream(client: httpx2.AsyncClient, path: str, latencies: list[float],
                      headers: dict[str, str] | None = None, first_only: bool = False) -> int:
    from unbroken.framing import SSEDecoder

    decoder = SSEDecoder()
    count = 0
    async with client.stream("GET", path, headers=headers or {}) as response:
        # Frames yielded before the reader was connected are catch-up, not delivery delay.
        connected = time.time()
        async for chunk in response.aiter_raw():
            now = time.time()
            for event in decoder.receive_data(chunk):
                if event.event == "end":
                    return count
                count += 1
                if first_only:
                    return count
                latencies.append(now - max(connected, json.loads(event.data)["t"]))
    return count


async def run_level(url: str, variant: str, streams: int, fps: float,
                    n: int) -> tuple[int, float, list[float]]:
    latencies: list[float] = []
    limits = httpx2.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx2.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        async def one(delay: float) -> int:
            await asyncio.sleep(delay)
            try:
                path = await open_stream(client, variant, n, fps)
                return await read_stream(client, path, latencies)
            except (httpx2.HTTPError, ValueError, KeyError) as exc:
                # A server that breaks a stream under load: counted as frames not delivered.
                print(f"  {variant}: a stream failed: {exc!r}"[:200], file=sys.stderr)
                return 0

        began = time.perf_counter()
        counts = await asyncio.gather(*(one(i / streams) for i in range(streams)))
        elapsed = time.perf_counter() - began
    return sum(counts), elapsed, latencies


async def resume_times(url: str, variant: str) -> list[float]:
    """Time to the first missed frame of 200 reconnects with Last-Event-ID (ended streams)."""
    limits = httpx2.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx2.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        paths = await asyncio.gather(*(open_stream(client, variant, 20, 200.0)
                                       for _ in range(20)))
        firsts: list[list[str]] = []
        for path in paths:
            ids: list[str] = []
            from unbroken.framing import SSEDecoder

            decoder = SSEDecoder()
            async with client.stream("GET", path) as response:
                async for chunk in response.aiter_raw():
                    ids += [e.id for e in decoder.receive_data(chunk) if e.event != "end"]
            firsts.append(ids)
        times: list[float] = []
        for round_ in range(10):
            for path, ids in zip(paths, firsts, strict=True):
                last = ids[round_]
                began = time.perf_counter()
                await read_stream(client, path, [], headers={"last-event-id": last},
                                  first_only=True)
                times.append(time.perf_counter() - began)
    return times


async def memory_per_stream(url: str, variant: str, pid: int, count: int) -> float:
    """RSS growth per live stream (frames 2 s apart: streams mostly idle)."""
    limits = httpx2.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx2.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        await asyncio.sleep(0.5)
        before = rss_bytes(pid)
        paths = []
        for _batch in range(count // 50):  # starts in bursts of 50, as users arrive
            paths += await asyncio.gather(*(open_stream(client, variant, 3, 0.5)
                                            for _ in range(50)))
        readers = [asyncio.ensure_future(read_stream(client, path, [])) for path in paths]
        await asyncio.sleep(2.5)
        during = rss_bytes(pid)
        await asyncio.gather(*readers)
    return (during - before) / count


def start_server(variant: str, store: str) -> tuple[subprocess.Popen[bytes], str, int]:
    port = free_port()
    process = subprocess.Popen([sys.executable, __file__, "--serve", variant, "--port", str(port),
                                "--store", store], stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            pid = httpx2.get(url + "/healthz", timeout=2).json()["pid"]
            return process, url, pid
        except httpx2.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def pct(values: list[float], q: float) -> float:
    return percentile(sorted(values), q * 100)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve")
    parser.add_argument("--port", type=int)
    parser.add_argument("--store", default="memory://")
    parser.add_argument("--levels", default="100,300,600")
    parser.add_argument("--fps", type=float, default=40.0)
    parser.add_argument("--frames", type=int, default=80)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--live", type=int, default=1000,
                        help="streams held live for the memory figure (a multiple of 50)")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.store)
        return
    from tests.redis_server import running_redis

    levels = [int(level) for level in args.levels.split(",")]
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp, running_redis(Path(tmp) / "redis") as redis_url:
        redis_pid = int(subprocess.check_output(
            ["redis-cli", "-u", redis_url, "info", "server"]).decode().split(
            "process_id:")[1].split()[0])
        stores = {"bare": "memory://", "memory": "memory://",
                  "sqlite": f"sqlite:///{tmp}/bench.db", "redis": redis_url,
                  "handwritten-redis": redis_url}
        for variant in args.variants.split(","):
            process, url, pid = start_server(variant, stores[variant])
            try:
                row: dict[str, Any] = {"levels": {}}
                row["mem_kib"] = asyncio.run(
                    memory_per_stream(url, variant, pid, args.live)) / 1024
                for level in levels:
                    cpu0, rcpu0 = cpu_seconds(pid), cpu_seconds(redis_pid)
                    delivered, elapsed, latencies = asyncio.run(
                        run_level(url, variant, level, args.fps, args.frames))
                    cpu = cpu_seconds(pid) - cpu0
                    rcpu = cpu_seconds(redis_pid) - rcpu0
                    expected = level * args.frames
                    p99 = pct(latencies, 0.99)
                    row["levels"][level] = {
                        "fps": delivered / elapsed, "ok": delivered == expected
                        and p99 < SUSTAINED_P99_S, "cpu_us": cpu / max(1, delivered) * 1e6,
                        "redis_us": rcpu / max(1, delivered) * 1e6 if "redis" in variant
                        else None,
                        "p50_ms": pct(latencies, 0.5) * 1000, "p99_ms": p99 * 1000}
                    print(variant, level, row["levels"][level], flush=True)
                if variant != "bare":
                    times = asyncio.run(resume_times(url, variant))
                    row["resume_p50_ms"] = statistics.median(times) * 1000
                    row["resume_p99_ms"] = pct(times, 0.99) * 1000
                results[variant] = row
            finally:
                process.terminate()
                process.wait(timeout=30)
    report(results, levels, args)


def report(results: dict[str, dict[str, Any]], levels: list[int], args: Any) -> None:
    print(f"\n{args.frames} frames per stream at {args.fps:g} frames/s; levels: {levels} "
          f"concurrent streams; sustained = every frame delivered and p99 < "
          f"{SUSTAINED_P99_S * 1000:g} ms")
    bare = results.get("bare")
    print("| variant | max sustained frames/s | vs bare | CPU µs/frame (redis) | p50 / p99 ms "
          "(added) | resume p50 / p99 ms | KiB per live stream |")
    print("|---|---|---|---|---|---|---|")
    for variant, row in results.items():
        sustained = [level for level in levels if row["levels"][level]["ok"]]
        top = row["levels"][max(sustained)] if sustained else None
        at = row["levels"][levels[0]]
        base = bare["levels"][levels[0]] if bare else None
        top_fps = top["fps"] if top else 0.0
        bare_top = max((bare["levels"][lv]["fps"] for lv in levels if bare["levels"][lv]["ok"]),
                       default=0.0) if bare else 0.0
        ratio = f"{top_fps / bare_top:.2f}x" if bare_top else "-"
        redis_part = f" ({at['redis_us']:.0f})" if at["redis_us"] is not None else ""
        added = f" (+{at['p50_ms'] - base['p50_ms']:.1f} / +{at['p99_ms'] - base['p99_ms']:.1f})" \
            if base and variant != "bare" else ""
        resume = f"{row['resume_p50_ms']:.1f} / {row['resume_p99_ms']:.1f}" \
            if "resume_p50_ms" in row else "-"
        print(f"| {variant} | {top_fps:,.0f} | {ratio} | {at['cpu_us']:.0f}{redis_part} | "
              f"{at['p50_ms']:.1f} / {at['p99_ms']:.1f}{added} | {resume} | "
              f"{row['mem_kib']:.1f} |")


if __name__ == "__main__":
    main()
