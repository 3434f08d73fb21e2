"""The resumable proxy under load, beside a bare pass-through and the upstream served directly.

Every server is its own process under uvicorn on 127.0.0.1; this script is the load generator
(its own process too) and starts them with ``serve KIND``:

- ``mock``: ``unbroken.mock``, the fake upstream (openai-chat streams of ``tokens`` deltas);
- ``paced``: an openai-chat upstream that sends frames at a set rate, each carrying its send
  time (``time.monotonic_ns``, one clock for every process), to measure per-frame latency;
- ``passthrough``: httpx2 stream -> Starlette ``StreamingResponse``, no parsing, no journal: the
  floor any proxy in Python pays;
- ``proxy``: ``unbroken.proxy`` with a SQLite journal (WAL) in a temporary directory.

Figures (targets from issue 6 on this 2-core machine):

1. highest sustained frames/s through each path (concurrency 1, 8, 32; the best), and the CPU
   the middle process spends per frame; proxy / pass-through >= 0.67;
2. per-frame latency (p50/p99 direct, through the pass-through and through the proxy) at half
   the pass-through's highest rate and at 2,000 frames/s; the proxy's added p99 < 20 ms;
3. memory per live stream: the server's RSS growth with many stalled streams open;
4. resume latency: a new connection with ``Last-Event-ID`` to the first missed frame, p50/p99,
   on ``GET /v1/streams/{id}/events`` and on the same POST; p99 < 20 ms.

Latency is measured with one frame per upstream chunk (the worst case for any proxy: nothing
to batch) at two rates: half the pass-through's best, and a steady 2,000 frames/s. On a shared
2-core machine every figure moves with whatever else runs; compare rows of one run.

    python benchmarks/proxy.py [--quick] [--loop auto|asyncio|uvloop] [--http auto|h11|httptools]
                               [--journal sqlite|redis|both] [--scenario fast|load]

``--scenario load`` (issue 17) is LLM-realistic traffic instead: many concurrent ``paced``
streams at ``--rate`` frames/s each (default 50, one frame per HTTP chunk, ``--frames`` 200
each), the streams doubling from ``--start`` then bisected to the highest sustained rate (>= 95 %
of the offered frames/s delivered, p99 <= 250 ms). The middle process is pinned to one core, the
upstream, redis-server and the load generator to the other. Peers in the same run: the bare
pass-through, the proxy on SQLite and on Redis (``--journal both``, the default there) and the
proxy without the write that follows the upstream's answer (write-ahead's cost; ``--no-pending``
leaves it out). Per peer: highest sustained frames/s, CPU µs per frame there, p50/p99 latency
at half the SQLite proxy's highest rate (added: minus the upstream read directly), and RSS
growth per live stream over ``--live`` (1,000) slow streams on a fresh process. ``--quick``
keeps it to a few minutes.

``--scenario level`` runs one level of it (``--streams``, default 60) through the pass-through
and the proxy on a memory journal and on ``--journal``, in turn for ``--rounds`` rounds: the
median CPU per frame of each beside the pass-through's (where the proxy's extra goes).

``--otel`` measures only what OpenTelemetry costs the proxy: three proxies in front of one
mock, ``unbroken.telemetry`` off in two (their spread shows the machine's noise) and on in the
third (the SDK's tracer with a batch processor and a discarding exporter, its meter with an
in-memory reader), CPU per frame of each, rounds interleaved, and the ratio.

``--journal redis`` runs the proxies on ``RedisJournal`` against a redis-server this script
starts on 127.0.0.1 (its CPU is not in the proxy's figures; it runs on the same two cores).

The default ``auto`` is what ``unbroken proxy`` runs with: uvloop and httptools, which the
``proxy`` extra installs, or asyncio and h11 without them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script, from anywhere
from benchmarks.journal import redis_server
from benchmarks.processes import cpu_seconds, free_port, percentile, rss_bytes

CHAT = "/v1/chat/completions"
BODY = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
AUTH = {"authorization": "Bearer sk-bench", "content-type": "application/json"}
SENT = re.compile(rb'"content":"(\d+)"')  # a paced frame's send time (monotonic ns)


# -- servers (run as `python benchmarks/proxy.py serve KIND ...`) -----------------------------


async def paced_server(port: int) -> None:
    """openai-chat frames at ``x-rate`` per second, each with its send time as content.

    A bare asyncio server, not an ASGI app: it stands for the provider, which runs on another
    machine, so it should take as little of this 2-core machine's CPU as it can (an ASGI app
    under uvicorn cost as much per frame as the pass-through it feeds, and the processes
    preempting each other showed up as latency of whatever was measured). One HTTP/1.1 chunk
    per frame, ``connection: close``.
    """
    head = (b'{"id":"chatcmpl-p","object":"chat.completion.chunk","created":0,"model":"m",'
            b'"choices":[{"index":0,"delta":{"content":"%d"},"finish_reason":null}]}')
    tail = (b'data: {"id":"chatcmpl-p","object":"chat.completion.chunk","created":0,"model":"m",'
            b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')

    def chunk(payload: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(payload), payload)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head_bytes = await reader.readuntil(b"\r\n\r\n")
            headers = dict(
                line.split(": ", 1)
                for line in head_bytes.decode("latin-1").lower().split("\r\n")[1:] if ": " in line
            )
            await reader.readexactly(int(headers.get("content-length", "0")))
            frames = int(headers.get("x-frames", "100"))
            rate = float(headers.get("x-rate", "100"))
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n")
            start = time.monotonic()
            for index in range(frames):
                delay = start + index / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                writer.write(chunk(b"data: " + head % time.monotonic_ns() + b"\n\n"))
                if writer.transport.get_write_buffer_size() > 2**16:
                    await writer.drain()
            writer.write(chunk(tail) + b"0\r\n\r\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, RuntimeError):
            pass  # the reader went away (uvloop raises RuntimeError on a closed transport)
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", port, backlog=512)
    async with server:
        await server.serve_forever()


def passthrough_app(upstream: str) -> Any:
    """The bare pass-through: forward the request, stream the raw body back."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    client = httpx2.AsyncClient(timeout=None, limits=httpx2.Limits(max_connections=None))
    hop = {"host", "content-length", "connection", "transfer-encoding"}

    async def forward(request: Request) -> StreamingResponse:
        headers = [(k, v) for k, v in request.headers.items() if k not in hop]
        response = await client.send(
            client.build_request(request.method, upstream + request.url.path,
                                 headers=headers, content=await request.body()),
            stream=True,
        )

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in response.aiter_raw():
                    yield chunk
            finally:
                await response.aclose()

        kept = {k: v for k, v in response.headers.items() if k not in hop}
        return StreamingResponse(body(), status_code=response.status_code, headers=kept)

    return Starlette(routes=[Route("/{path:path}", forward, methods=["POST", "GET"])])


def skip_answered(app: Any) -> None:
    """Make the proxy's journal skip ``answered``: each stream then costs one journal write
    before its frames (the create), as it did before write-ahead, instead of two. Only the
    stored media type and headers differ, which this benchmark never reads back."""
    from unbroken.streams.journal import Journal

    async def nothing(self: Journal, meta: Any) -> None:
        return None

    Journal.answered = nothing  # type: ignore[method-assign]


def serve(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="proxy.py serve")
    parser.add_argument("kind", choices=("mock", "paced", "passthrough", "proxy"))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", default="")
    parser.add_argument("--store", default="memory://")
    parser.add_argument("--loop", default="auto")
    parser.add_argument("--http", default="auto")
    parser.add_argument("--skip-answered", action="store_true",
                        help="proxy: skip the journal write that follows the upstream's answer "
                             "(the benchmark's stand-in for a proxy without write-ahead)")
    parser.add_argument("--otel", default="0")
    args = parser.parse_args(argv)
    import uvicorn

    app: Any
    if args.kind == "paced":
        if args.loop == "uvloop" or (args.loop == "auto" and find_spec("uvloop")):
            import uvloop

            uvloop.run(paced_server(args.port))
        else:
            asyncio.run(paced_server(args.port))
        return
    if args.kind == "mock":
        from unbroken.mock import create_app

        app = create_app()
    elif args.kind == "passthrough":
        app = passthrough_app(args.upstream)
    else:
        from unbroken.proxy import ProxyConfig
        from unbroken.proxy import create_app as proxy_app
        from unbroken.proxy.config import PROVIDERS
        from unbroken.proxy.shutdown import freeze_startup_heap

        origins = dict.fromkeys(PROVIDERS, args.upstream)
        app = proxy_app(ProxyConfig(origins=origins, store=args.store))
        if args.skip_answered:
            skip_answered(app)
        if args.otel == "1":
            instrument_discarding()
        freeze_startup_heap()  # as `unbroken proxy` does
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", loop=args.loop,
                http=args.http, access_log=False)


def instrument_discarding() -> None:
    """``unbroken.telemetry`` on, through the OpenTelemetry SDK, its spans exported nowhere."""
    from collections.abc import Sequence

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from unbroken import telemetry

    class Discard(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(Discard()))
    telemetry.instrument(tracer_provider=tracer_provider,
                         meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]))


def otel_report(options: argparse.Namespace, tokens: int) -> None:
    """CPU per frame of the proxy with telemetry off and on, interleaved rounds."""
    rounds = 3 if options.quick else 7
    tokens *= 2  # CPU time is read in clock ticks (10 ms): longer rounds, finer figures
    print(f"\nOpenTelemetry: proxy CPU us/frame, openai-chat from the mock, 8 streams of "
          f"{tokens} deltas, best of {rounds} interleaved rounds")
    with tempfile.TemporaryDirectory() as tmp, start("mock", options) as mock, \
            start("proxy", options, upstream=mock.url,
                  store=f"sqlite:///{Path(tmp) / 'off'}.db") as off, \
            start("proxy", options, upstream=mock.url, otel="1",
                  store=f"sqlite:///{Path(tmp) / 'on'}.db") as on, \
            start("proxy", options, upstream=mock.url,
                  store=f"sqlite:///{Path(tmp) / 'again'}.db") as again:
        best = {"off": float("inf"), "on": float("inf"), "off again": float("inf")}
        for _ in range(rounds):
            for name, server in (("off", off), ("on", on), ("off again", again)):
                _rate, cpu, _streams = best_rate(server, server.url, tokens, (8,))
                best[name] = min(best[name], cpu)
        off_best = min(best["off"], best["off again"])
        print(f"   otel off {best['off']:.1f} / {best['off again']:.1f} (two proxies)  "
              f"otel on {best['on']:.1f}  on/off {best['on'] / off_best:.3f}  "
              f"(target <= 1.05)")


# -- process handling ---------------------------------------------------------------------------


@dataclass
class Server:
    kind: str
    url: str
    process: subprocess.Popen[bytes]

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.process.pid)

    def rss_bytes(self) -> int:
        return rss_bytes(self.process.pid)


@contextmanager
def start(kind: str, options: argparse.Namespace, *, cpus: set[int] | None = None,
          flags: tuple[str, ...] = (), quiet: bool = False, **extra: str) -> Iterator[Server]:
    """Start a server process; ``cpus``: the cores it (and every thread it starts) may run on;
    ``quiet``: without its log (the proxy logs every live stream it ends when stopped)."""
    port = free_port()
    command = [sys.executable, __file__, "serve", kind, "--port", str(port),
               "--loop", options.loop, "--http", options.http, *flags]
    for name, value in extra.items():
        command += [f"--{name}", value]
    pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
    process = subprocess.Popen(command, preexec_fn=pin,
                               stderr=subprocess.DEVNULL if quiet else None)
    server = Server(kind, f"http://127.0.0.1:{port}", process)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{kind} did not start") from None
                time.sleep(0.05)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- 1. throughput ------------------------------------------------------------------------------


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
    expected = tokens + 3
    if any(count != expected for count in counts):
        raise RuntimeError(f"{base}: frames {sorted(set(counts))}, expected {expected}")
    return sum(counts), elapsed


def best_rate(server: Server | None, base: str, tokens: int,
              levels: tuple[int, ...]) -> tuple[float, float, int]:
    """Highest frames/s over the concurrency levels; CPU ms per 1000 frames of ``server``."""
    asyncio.run(throughput(base, 2, 50))  # warm up connections and imports
    best = (0.0, 0.0, 0)
    for streams in levels:
        cpu = server.cpu_seconds() if server else 0.0
        frames, elapsed = asyncio.run(throughput(base, streams, tokens))
        used = (server.cpu_seconds() - cpu) if server else 0.0
        rate = frames / elapsed
        if rate > best[0]:
            best = (rate, 1e6 * used / frames, streams)
    return best


# -- 2. latency ---------------------------------------------------------------------------------


async def timed_frames(base: str, frames: int, rate: float) -> tuple[list[float], int, int]:
    """One paced stream read from a bare socket: per-frame latency (ms), the first frame's send
    time and the last one's receive time (monotonic ns). The load generator stands for clients
    on other machines, so it spends as little CPU here as it can; the frames' send times are
    found in the raw body (chunk-size lines never split a frame)."""
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write((f"POST {CHAT} HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer sk-bench\r\n"
                  f"content-type: application/json\r\nx-frames: {frames}\r\nx-rate: {rate}\r\n"
                  f"content-length: {len(BODY)}\r\nconnection: close\r\n\r\n{BODY}").encode())
    out: list[float] = []
    buffer = b""
    first = last = 0
    try:
        while chunk := await reader.read(2**16):
            now = time.monotonic_ns()
            buffer += chunk
            end = 0
            for match in SENT.finditer(buffer):
                sent = int(match[1])
                first = first or sent
                out.append((now - sent) / 1e6)
                end = match.end()
                last = now
            buffer = buffer[end:][-64:]  # what may be the start of the next send time
    finally:
        writer.close()
    return out, first, last


async def latencies_of(base: str, frames: int, rate: float) -> list[float]:
    """Per-frame latency (ms) of one paced stream; every frame must arrive."""
    out, _, _ = await timed_frames(base, frames, rate)
    if len(out) != frames:
        raise RuntimeError(f"{base}: {len(out)} timed frames, expected {frames}")
    return out


async def latency(base: str, streams: int, rate: float, seconds: float) -> list[float]:
    per_stream = rate / streams
    frames = max(10, int(per_stream * seconds))
    runs = await asyncio.gather(
        *(latencies_of(base, frames, per_stream) for _ in range(streams)))
    return sorted(value for run in runs for value in run)


# -- 3. memory per live stream ------------------------------------------------------------------


async def hold_streams(server: Server, base: str, streams: int) -> float:
    """RSS growth per stream with ``streams`` upstream-stalled streams open (bytes)."""
    headers = AUTH | {"unbroken-mock": "seed=2; tokens=50; stall_after=5; stall_s=120"}
    limits = httpx2.Limits(max_connections=None, max_keepalive_connections=0)
    async with httpx2.AsyncClient(timeout=60, limits=limits) as client:
        await throughput(base, 4, 20)  # allocate what any stream allocates once
        before = server.rss_bytes()
        opened: list[Any] = []
        for _ in range(streams):
            context = client.stream("POST", base + CHAT, content=BODY, headers=headers)
            response = await context.__aenter__()
            seen = b""
            async for chunk in response.aiter_raw():
                seen += chunk
                if seen.count(b"\n\n") >= 5:
                    break
            opened.append(context)
        await asyncio.sleep(0.5)
        after = server.rss_bytes()
        for context in opened:
            await context.__aexit__(None, None, None)
    return (after - before) / streams


# -- 4. resume latency --------------------------------------------------------------------------


async def first_frame_after(port: int, request: bytes) -> float:
    """Seconds from connecting to the first whole frame of the answer."""
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = b""
    while True:
        chunk = await reader.read(65536)
        if not chunk:
            raise RuntimeError(f"connection closed before the first frame: {data[:200]!r}")
        data += chunk
        head_end = data.find(b"\r\n\r\n")
        if head_end >= 0 and data.find(b"\n\n", head_end + 4) >= 0:
            break
    elapsed = time.perf_counter() - started
    if not data.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"resume answered {data[:60]!r}")
    writer.close()
    await writer.wait_closed()
    return elapsed


async def resumes(base: str, streams: int, tokens: int, count: int) -> dict[str, list[float]]:
    port = int(base.rsplit(":", 1)[1])
    headers = AUTH | {"unbroken-mock": f"seed=3; tokens={tokens}"}
    made: list[str] = []
    async with httpx2.AsyncClient(timeout=60) as client:
        for _ in range(streams):
            response = await client.post(base + CHAT, content=BODY, headers=headers)
            made.append(response.headers["unbroken-stream-id"])
    rng = random.Random(5)
    out: dict[str, list[float]] = {"GET events": [], "same POST": []}
    body = BODY.encode()
    for index in range(count):
        stream_id = rng.choice(made)
        after = rng.randrange(tokens + 2)
        common = (f"Host: 127.0.0.1\r\nAuthorization: Bearer sk-bench\r\n"
                  f"Last-Event-ID: {stream_id}:{after}\r\n")
        if index % 2:
            request = (f"GET /v1/streams/{stream_id}/events HTTP/1.1\r\n{common}"
                       "Accept: text/event-stream\r\nConnection: close\r\n\r\n").encode()
            out["GET events"].append(await first_frame_after(port, request))
        else:
            request = (f"POST {CHAT} HTTP/1.1\r\n{common}Content-Type: application/json\r\n"
                       f"Unbroken-Mock: seed=3; tokens={tokens}\r\n"
                       f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
            out["same POST"].append(await first_frame_after(port, request + body))
    return {name: sorted(values) for name, values in out.items()}


# -- the run ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs (a smoke test)")
    parser.add_argument("--loop", default="auto",
                        help="uvicorn loop: auto (uvloop when installed, as `unbroken proxy`), "
                             "asyncio or uvloop")
    parser.add_argument("--http", default="auto",
                        help="uvicorn http: auto (httptools when installed), h11 or httptools")
    parser.add_argument("--journal", choices=("sqlite", "redis", "both"), default=None,
                        help="the proxies' journal: a SQLite file or a redis-server started on "
                             "127.0.0.1 (default: sqlite; the load scenario: both)")
    parser.add_argument("--scenario", choices=("fast", "load", "level"), default="fast",
                        help="fast: a few fast streams (figures 1-4 of the docstring); "
                             "load: many slow streams, one frame per chunk (issue 17); "
                             "level: one level of the load scenario, the peers in turn")
    load = parser.add_argument_group("the load scenario")
    load.add_argument("--rate", type=float, default=50.0, help="frames/s of each stream")
    load.add_argument("--frames", type=int, default=None,
                      help="frames of each stream (default 200; --quick 150)")
    load.add_argument("--start", type=int, default=None,
                      help="streams of the first level (default 16; --quick 32)")
    load.add_argument("--max-streams", type=int, default=2048)
    load.add_argument("--bisect", type=int, default=None,
                      help="bisection steps after the doubling (default 2; --quick 1)")
    load.add_argument("--live", type=int, default=1000,
                      help="live slow streams held for the memory figure")
    load.add_argument("--no-pending", dest="pending", action="store_false",
                      help="leave out the proxy without its answered write (write-ahead's cost)")
    load.add_argument("--streams", type=int, default=60,
                      help="--scenario level: the streams of the one level")
    load.add_argument("--rounds", type=int, default=3,
                      help="--scenario level: rounds, the peers in turn in each")
    parser.add_argument("--otel", action="store_true",
                        help="only the proxy's CPU per frame with OpenTelemetry off and on")
    options = parser.parse_args()
    if options.scenario == "level":
        options.journal = options.journal or "sqlite"
        options.frames = options.frames or 200
        level_scenario(options)
        return
    if options.scenario == "load":
        options.journal = options.journal or "both"
        options.frames = options.frames or (150 if options.quick else 200)
        options.start = options.start or (32 if options.quick else 16)
        options.bisect = options.bisect if options.bisect is not None else (
            1 if options.quick else 2)
        load_scenario(options)
        return
    options.journal = options.journal or "sqlite"
    if options.journal == "both":
        parser.error("the fast scenario runs on one journal: sqlite or redis")
    tokens = 300 if options.quick else 2000
    if options.otel:
        otel_report(options, tokens)
        return
    levels = (1, 8) if options.quick else (1, 8, 32)
    print(f"loop={options.loop} http={options.http} journal={options.journal} "
          f"tokens/stream={tokens} cpus={os.cpu_count()}")
    with tempfile.TemporaryDirectory() as tmp, (
        redis_server(Path(tmp)) if options.journal == "redis" else nullcontext(None)
    ) as redis_url:
        if options.journal == "redis" and redis_url is None:
            parser.error("--journal redis needs the redis-server program")
        options.stores = iter(
            [f"{redis_url}?prefix={name}:" for name in ("mock", "paced", "held")]
            if redis_url else [f"sqlite:///{Path(tmp) / name}.db" for name in
                               ("mock", "paced", "held")])
        with start("mock", options) as mock, start("paced", options) as paced, \
                start("passthrough", options, upstream=mock.url) as pass_mock, \
                start("proxy", options, upstream=mock.url, store=next(options.stores)) as \
                proxy_mock, \
                start("passthrough", options, upstream=paced.url) as pass_paced, \
                start("proxy", options, upstream=paced.url, store=next(options.stores)) as \
                proxy_paced:
            report(options, tokens, levels, mock, paced, pass_mock, proxy_mock, pass_paced,
                   proxy_paced)


def report(options: argparse.Namespace, tokens: int, levels: tuple[int, ...], mock: Server,
           paced: Server, pass_mock: Server, proxy_mock: Server, pass_paced: Server,
           proxy_paced: Server) -> None:
    print("\n1. highest sustained frames/s (openai-chat from the mock)")
    print(f"   {'path':<14}{'frames/s':>12}{'streams':>9}{'CPU us/frame (middle)':>24}")
    rates = {}
    for name, server, base in (("direct", None, mock.url),
                               ("pass-through", pass_mock, pass_mock.url),
                               ("proxy", proxy_mock, proxy_mock.url)):
        rate, cpu, streams = best_rate(server, base, tokens, levels)
        rates[name] = rate
        cpu_text = f"{cpu:.1f}" if server else "-"
        print(f"   {name:<14}{rate:>12,.0f}{streams:>9}{cpu_text:>24}")
    ratio = rates["proxy"] / rates["pass-through"]
    print(f"   proxy / pass-through = {ratio:.2f}  (target >= 0.67)")

    seconds = 2.0 if options.quick else 4.0
    half = rates["pass-through"] / 2
    for number, rate, why in (("2a", half, "half the pass-through's best"),
                              ("2b", 2000.0, "20 streams x 100 frames/s")):
        print(f"\n{number}. per-frame latency at {rate:,.0f} frames/s ({why}), one frame per "
              "upstream chunk, 20 streams, ms")
        print(f"   {'path':<14}{'p50':>8}{'p99':>8}{'max':>8}{'CPU us/frame':>14}")
        lat = {}
        for name, server, base in (("direct", None, paced.url),
                                   ("pass-through", pass_paced, pass_paced.url),
                                   ("proxy", proxy_paced, proxy_paced.url)):
            cpu = server.cpu_seconds() if server else 0.0
            values = asyncio.run(latency(base, 20, rate, seconds))
            used = (server.cpu_seconds() - cpu) if server else 0.0
            lat[name] = values
            cpu_text = f"{1e6 * used / len(values):.1f}" if server else "-"
            print(f"   {name:<14}{percentile(values, 50):>8.2f}{percentile(values, 99):>8.2f}"
                  f"{values[-1]:>8.2f}{cpu_text:>14}")
        for name in ("pass-through", "proxy"):
            added50 = percentile(lat[name], 50) - percentile(lat["direct"], 50)
            added99 = percentile(lat[name], 99) - percentile(lat["direct"], 99)
            print(f"   added by {name}: p50 {added50:.2f} ms, p99 {added99:.2f} ms"
                  + ("  (target p99 < 20 ms)" if name == "proxy" else ""))

    count = 100 if options.quick else 400
    print(f"\n3. resume: new connection + Last-Event-ID -> first missed frame ({count} resumes "
          "of 20 finished streams), ms")
    for name, values in asyncio.run(resumes(proxy_mock.url, 20, 200, count)).items():
        print(f"   {name:<14} p50 {1000 * percentile(values, 50):.2f}  "
              f"p99 {1000 * percentile(values, 99):.2f}  (target p99 < 20 ms)")

    held = 50 if options.quick else 200
    print(f"\n4. memory per live stream ({held} upstream-stalled streams open, fresh processes),"
          " KiB of RSS")
    with start("passthrough", options, upstream=mock.url) as fresh_pass, \
            start("proxy", options, upstream=mock.url, store=next(options.stores)) as \
            fresh_proxy:
        for name, server in (("pass-through", fresh_pass), ("proxy", fresh_proxy)):
            per_stream = asyncio.run(hold_streams(server, server.url, held))
            print(f"   {name:<14}{per_stream / 1024:>8.1f}")


# -- 5. realistic load: many slow streams, one frame per chunk (issue 17) -----------------------

SUSTAINED_SHARE = 0.95  # of the offered frames/s delivered ...
SUSTAINED_P99_MS = 250.0  # ... with at most this p99 latency
STAGGER_S = 1.0  # a level's streams start spread over this long, as users arrive


@dataclass
class Level:
    """One level of the load: ``streams`` paced streams at once through one path."""

    streams: int
    offered: float  # frames/s asked for: streams x the per-stream rate
    delivered: float  # frames/s the streams got (offered x their share of it)
    frames: int  # frames received in all
    p50: float  # ms, per-frame latency from the upstream's send to the reader's receive
    p99: float
    cpu_us: float  # the middle process's CPU per frame received
    side_us: float  # redis-server's CPU per frame (0 without Redis)

    @property
    def sustained(self) -> bool:
        return self.delivered >= SUSTAINED_SHARE * self.offered and self.p99 <= SUSTAINED_P99_MS


async def paced_streams(base: str, streams: int, rate: float,
                        frames: int) -> tuple[list[float], int, float]:
    """``streams`` paced streams, started over ``STAGGER_S``: their latencies (ms, sorted), the
    frames received and the share of the asked rate they got: how long the level should take
    (the stagger, then one stream's frames at ``rate``) over how long it took, from its start to
    the last frame received, times the share of frames that arrived. So a path that is slow to
    accept or connect streams, which spreads them out and lowers the real concurrency, or
    that falls behind, gets less than its offered rate; a stream that broke or ran past the
    bound counts for what it delivered."""
    ideal = STAGGER_S * (streams - 1) / streams + (frames - 1) / rate
    began = time.monotonic_ns()

    async def one(delay: float) -> tuple[list[float], int]:
        await asyncio.sleep(delay)
        try:
            got, _, last = await asyncio.wait_for(
                timed_frames(base, frames, rate), timeout=3 * ideal + 10)
        except (TimeoutError, OSError):
            return [], 0
        return got, last

    runs = await asyncio.gather(*(one(STAGGER_S * i / streams) for i in range(streams)))
    latencies = sorted(value for got, _ in runs for value in got)
    took = (max(last for _, last in runs) - began) / 1e9
    share = min(1.0, ideal / took) * len(latencies) / (streams * frames) if took > 0 else 0.0
    return latencies, len(latencies), share


def load_level(server: Server | None, base: str, streams: int, rate: float, frames: int,
               side: int | None = None) -> Level:
    cpu = server.cpu_seconds() if server else 0.0
    side_cpu = cpu_seconds(side) if side else 0.0
    latencies, received, share = run_async(paced_streams(base, streams, rate, frames))
    used = (server.cpu_seconds() - cpu) if server else 0.0
    side_used = (cpu_seconds(side) - side_cpu) if side else 0.0
    per = 1e6 / max(1, received)
    return Level(streams, streams * rate, streams * rate * share, received,
                 percentile(latencies, 50), percentile(latencies, 99), used * per,
                 side_used * per)


def run_async(work: Any) -> Any:
    """Run the load generator's coroutine on uvloop when installed (less CPU per frame read)."""
    if find_spec("uvloop"):
        import uvloop

        return uvloop.run(work)
    return asyncio.run(work)


class Search:
    """One peer's search for its highest sustained level: doubling from ``--start`` streams
    until a level is not sustained (twice: a level that fails is run once more, since one burst
    of the shared machine's other work can sink it), then bisecting between the last level that
    was and the first that was not (``--bisect`` steps)."""

    def __init__(self, name: str, server: Server, side: int | None,
                 options: argparse.Namespace) -> None:
        self.name, self.server, self.side = name, server, side
        self.best: Level | None = None
        self._failed: int | None = None
        self._retried: set[int] = set()
        self._steps = options.bisect
        self._max = options.max_streams
        self.next: int | None = options.start

    def record(self, level: Level) -> None:
        streams = level.streams
        if not level.sustained and streams not in self._retried:
            self._retried.add(streams)
            return  # self.next stays: the same level once more
        if level.sustained:
            self.best = level
        else:
            self._failed = streams
        if self._failed is None:
            self.next = streams * 2 if streams * 2 <= self._max else None
            return
        low = self.best.streams if self.best else 0
        middle = (low + self._failed) // 2
        if self._steps <= 0 or middle in (low, self._failed) or not low:
            self.next = None
            return
        self._steps -= 1
        self.next = middle


def highest_sustained(searches: list[Search], options: argparse.Namespace) -> None:
    """Step every peer's search in turn, one level each, so that the shared machine's other
    work falls on every peer alike; each ends with its ``best``."""
    for search in searches:
        run_async(paced_streams(search.server.url, 4, options.rate, 20))  # warm up
    while active := [search for search in searches if search.next is not None]:
        for search in active:
            assert search.next is not None
            level = load_level(search.server, search.server.url, search.next, options.rate,
                               options.frames, search.side)
            mark = "ok" if level.sustained else "not sustained"
            print(f"     {search.name:<24}{level.streams:>6} streams: {level.delivered:>9,.0f} "
                  f"of {level.offered:>9,.0f} frames/s, p99 {level.p99:7.1f} ms, "
                  f"{level.cpu_us:6.1f} us/frame  {mark}", flush=True)
            search.record(level)


async def hold_paced(base: str, streams: int) -> list[asyncio.StreamWriter]:
    """Open ``streams`` slow paced streams (2 frames/s, 60 frames), in bursts of 50 as users
    arrive; return once each has received its first frame."""
    host, port = base.removeprefix("http://").split(":")
    request = (f"POST {CHAT} HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer sk-bench\r\n"
               f"content-type: application/json\r\nx-frames: 60\r\nx-rate: 2\r\n"
               f"content-length: {len(BODY)}\r\nconnection: close\r\n\r\n{BODY}").encode()

    async def one() -> asyncio.StreamWriter:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(request)
        seen = b""
        while not SENT.search(seen):
            chunk = await asyncio.wait_for(reader.read(2**16), timeout=30)
            if not chunk:
                raise RuntimeError(f"{base}: a held stream closed: {seen[:200]!r}")
            seen += chunk
        return writer

    writers: list[asyncio.StreamWriter] = []
    for start_at in range(0, streams, 50):
        writers += await asyncio.gather(*(one() for _ in range(min(50, streams - start_at))))
    return writers


async def live_memory(server: Server, streams: int) -> float:
    """RSS growth per live slow stream (bytes) with ``streams`` of them open at once."""
    await paced_streams(server.url, 8, 50.0, 20)  # allocate what any stream allocates once
    await asyncio.sleep(0.5)
    before = server.rss_bytes()
    writers = await hold_paced(server.url, streams)
    await asyncio.sleep(1.0)
    after = server.rss_bytes()
    for writer in writers:
        writer.close()
    return (after - before) / streams


def load_scenario(options: argparse.Namespace) -> None:
    """Issue 17's scenario: see ``--help`` (``--scenario load``) and benchmarks/README.md."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) >= 2:
        # The proxy gets one core; the upstream, redis-server and this load generator the other
        # (set here first, so that the processes started below inherit it).
        proxy_cpus: set[int] | None = {cores[0]}
        os.sched_setaffinity(0, {cores[1]})
    else:
        proxy_cpus = None
    journals = ["sqlite", "redis"] if options.journal == "both" else [options.journal]
    print(f"load scenario: {options.rate:g} frames/s per stream, {options.frames} frames each, "
          f"one frame per chunk; sustained = >= {SUSTAINED_SHARE:.0%} of the offered rate "
          f"delivered and p99 <= {SUSTAINED_P99_MS:g} ms; proxy cores {proxy_cpus}, load "
          f"generator and upstream cores {os.sched_getaffinity(0)}; loop={options.loop} "
          f"http={options.http}; journals {journals}", flush=True)
    with tempfile.TemporaryDirectory() as tmp, (
        redis_server(Path(tmp)) if "redis" in journals else nullcontext(None)
    ) as redis_url:
        if "redis" in journals and redis_url is None:
            raise SystemExit("--journal redis needs the redis-server program")
        redis_pid = redis_process(redis_url) if redis_url else None

        def store(journal: str, name: str) -> tuple[str, ...]:
            """The ``--store`` option of a proxy peer (none for the pass-through)."""
            name = name.replace(" ", "-").replace(",", "")
            if not journal:
                return ()
            return ("--store", f"{redis_url}?prefix={name}:" if journal == "redis"
                    else f"sqlite:///{Path(tmp) / name}.db")

        peers: list[tuple[str, str, tuple[str, ...]]] = [("pass-through", "", ())]
        for journal in journals:
            peers.append((f"proxy {journal}", journal, ()))
        if options.pending:
            peers.append((f"proxy {journals[0]}, one write", journals[0], ("--skip-answered",)))
        with start("paced", options) as paced, ExitStack() as servers:
            print("\n  highest sustained rate (doubling, then bisecting the streams; the peers "
                  "in turn)")
            searches = []
            for name, journal, flags in peers:
                kind = "passthrough" if not journal else "proxy"
                server = servers.enter_context(start(
                    kind, options, cpus=proxy_cpus, upstream=paced.url,
                    flags=flags + store(journal, name)))
                searches.append(Search(name, server, redis_pid if journal == "redis" else None,
                                       options))
            highest_sustained(searches, options)
            best = {search.name: search.best for search in searches}
            own = best.get(f"proxy {journals[0]}")
            half = max(1, (own.streams if own else options.start) // 2)
            print(f"\n  latency at half the proxy's own highest rate: {half} streams, "
                  f"{half * options.rate:,.0f} frames/s", flush=True)
            at_half: dict[str, Level] = {
                "direct": load_level(None, paced.url, half, options.rate, options.frames)}
            for search in searches:
                at_half[search.name] = load_level(search.server, search.server.url, half,
                                                  options.rate, options.frames, search.side)
            memory: dict[str, float] = {}
            print(f"\n  memory: {options.live} live slow streams on a fresh process",
                  flush=True)
            for name, journal, flags in peers:
                if flags:
                    continue
                kind = "passthrough" if not journal else "proxy"
                with start(kind, options, cpus=proxy_cpus, upstream=paced.url, quiet=True,
                           flags=store(journal, "held " + name)) as server:
                    memory[name] = run_async(live_memory(server, options.live))
        load_report(peers, best, at_half, memory)


def level_scenario(options: argparse.Namespace) -> None:
    """One level of the load scenario (``--streams`` x ``--rate``, ``--frames`` each), the
    pass-through, the proxy on a memory journal (no storage at all: what the proxy's own
    machinery costs) and on the journal(s) asked for, in turn in each of ``--rounds`` rounds;
    the median CPU per frame of each, and its ratio to the pass-through's. Pinned as in the
    load scenario."""
    cores = sorted(os.sched_getaffinity(0))
    proxy_cpus: set[int] | None = {cores[0]} if len(cores) >= 2 else None
    if proxy_cpus is not None:
        os.sched_setaffinity(0, {cores[1]})
    journals = ["sqlite", "redis"] if options.journal == "both" else [options.journal]
    print(f"level scenario: {options.streams} streams x {options.rate:g} frames/s x "
          f"{options.frames} frames, {options.rounds} rounds; proxy cores {proxy_cpus}",
          flush=True)
    with tempfile.TemporaryDirectory() as tmp, (
        redis_server(Path(tmp)) if "redis" in journals else nullcontext(None)
    ) as redis_url, start("paced", options) as paced, ExitStack() as servers:
        if "redis" in journals and redis_url is None:
            raise SystemExit("--journal redis needs the redis-server program")
        stores = {"memory": "memory://", "sqlite": f"sqlite:///{Path(tmp) / 'level'}.db",
                  "redis": f"{redis_url}?prefix=level:"}
        peers = {"pass-through": servers.enter_context(
            start("passthrough", options, cpus=proxy_cpus, upstream=paced.url))}
        for journal in ["memory", *journals]:
            peers[f"proxy {journal}"] = servers.enter_context(start(
                "proxy", options, cpus=proxy_cpus, upstream=paced.url, quiet=True,
                flags=("--store", stores[journal])))
        for server in peers.values():  # what a process allocates once
            load_level(server, server.url, 10, options.rate, 50)
        cpu: dict[str, list[float]] = {name: [] for name in peers}
        for round_ in range(1, options.rounds + 1):
            for name, server in peers.items():
                level = load_level(server, server.url, options.streams, options.rate,
                                   options.frames)
                cpu[name].append(level.cpu_us)
                print(f"  round {round_}  {name:14} {level.cpu_us:6.1f} µs/frame  p50 "
                      f"{level.p50:5.2f} p99 {level.p99:6.2f} ms  delivered "
                      f"{level.delivered:,.0f} of {level.offered:,.0f} frames/s", flush=True)
    base = percentile(sorted(cpu["pass-through"]), 50)
    print("\n  median CPU µs per frame (ratio to the pass-through)")
    for name, values in cpu.items():
        median = percentile(sorted(values), 50)
        print(f"  {name:14} {median:6.1f}  {median / base:.2f}x")


def redis_process(url: str) -> int:
    """redis-server's pid (its CPU is counted apart from the proxy's)."""
    info = subprocess.check_output(["redis-cli", "-u", url, "info", "server"]).decode()
    return int(info.split("process_id:")[1].split()[0])


def load_report(peers: list[tuple[str, str, tuple[str, ...]]], best: dict[str, Level | None],
                at_half: dict[str, Level], memory: dict[str, float]) -> None:
    """The table; ratios against the pass-through. CPU per frame falls as the load rises (more
    frames per wake-up and per commit), so it is compared at the same load too (at half)."""
    base = best["pass-through"]
    base_half = at_half["pass-through"]
    print("\n| peer | highest sustained frames/s (streams) | vs pass-through | CPU us/frame "
          "there (redis) | p50 / p99 ms at half (added p99) | CPU us/frame at half | vs "
          "pass-through | KiB per live stream |")
    print("|---|---|---|---|---|---|---|---|")
    direct = at_half["direct"]
    print(f"| direct | - | - | - | {direct.p50:.2f} / {direct.p99:.2f} | - | - | - |")
    for name, _, _ in peers:
        level = best[name]
        half = at_half[name]
        rate = f"{level.delivered:,.0f} ({level.streams})" if level else "none"
        ratio = f"{level.delivered / base.delivered:.2f}x" if level and base else "-"
        side = f" ({level.side_us:.0f})" if level and level.side_us else ""
        cpu = f"{level.cpu_us:.1f}{side}" if level else "-"
        mem = f"{memory[name] / 1024:.1f}" if name in memory else "-"
        print(f"| {name} | {rate} | {ratio} | {cpu} | {half.p50:.2f} / {half.p99:.2f} "
              f"(+{half.p99 - direct.p99:.2f}) | {half.cpu_us:.1f} | "
              f"{half.cpu_us / base_half.cpu_us:.2f}x | {mem} |")
    print("\ntargets (issue 17): proxy >= 0.8x the pass-through's frames/s, <= 1.25x its CPU "
          "per frame, added p99 < 20 ms at half its own highest rate, <= 16 KiB per live stream")

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve(sys.argv[2:])
    else:
        main()
