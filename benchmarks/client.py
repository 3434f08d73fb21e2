"""The client's per-event cost over loopback: ``unbroken.stream`` vs the openai SDK vs httpx-sse.

The mock upstream runs in a subprocess (``python -m unbroken.mock``) on 127.0.0.1, so its work
shares neither this process's CPU time nor its GIL. Every peer streams the same request from it:
an openai-chat stream of ``--deltas`` text deltas (``tokens=N``, finish stop, no delays) and
must return exactly ``reply_text(0, N)``. Clients are built once, outside the timing.

Measured per run: the CPU time of this process (``time.process_time``; the server is elsewhere)
and the wall time. A run's *overhead* is its CPU time minus the raw read of the same body with
the same HTTP library (``iter_raw`` with httpx2 for unbroken and the openai SDK, which both run on
httpx2; with httpx for httpx-sse), divided by the frames in the body. Peers run interleaved,
``--repeat`` rounds; the best (least disturbed) run of each is reported.

    python benchmarks/client.py [--deltas 20000] [--repeat 5] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import pstats
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import httpx2
import openai
from httpx_sse import connect_sse

from unbroken._jsonparse import BACKEND
from unbroken.client import astream, stream
from unbroken.mock import reply_text

PATH = "/v1/chat/completions"
BODY = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


@dataclass(frozen=True, slots=True)
class Sample:
    cpu: float
    wall: float


Peer = Callable[[], tuple[str, int]]  # -> (text, bytes or frames seen)


@contextlib.contextmanager
def mock_upstream() -> Iterator[str]:
    """``python -m unbroken.mock`` on a free port of 127.0.0.1, until the block ends."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "unbroken.mock", "--host", "127.0.0.1", "--port", str(port)],
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx2.get(base + "/_mock/requests", timeout=1)
                break
            except httpx2.TransportError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the mock did not start") from None
                time.sleep(0.05)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=10)


def peers(base: str, deltas: int) -> dict[str, tuple[str, Peer]]:
    """name -> (baseline name, run); each run returns the text it assembled."""
    url = base + PATH
    headers = {"Unbroken-Mock": f"tokens={deltas}"}
    content = json.dumps(BODY).encode()
    h2 = httpx2.Client(timeout=60)
    h1 = httpx.Client(timeout=60)
    sdk = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0, http_client=h2)
    loop = asyncio.new_event_loop()
    ah2 = httpx2.AsyncClient(timeout=60)

    def raw_httpx2() -> tuple[str, int]:
        with h2.stream("POST", url, content=content, headers=headers) as response:
            return "", sum(len(chunk) for chunk in response.iter_raw())

    def raw_httpx() -> tuple[str, int]:
        with h1.stream("POST", url, content=content, headers=headers) as response:
            return "", sum(len(chunk) for chunk in response.iter_raw())

    def raw_httpx2_async() -> tuple[str, int]:
        async def run() -> int:
            async with ah2.stream("POST", url, content=content, headers=headers) as response:
                return sum([len(chunk) async for chunk in response.aiter_raw()])

        return "", loop.run_until_complete(run())

    def unbroken_stream(trace: bool) -> Peer:
        def run() -> tuple[str, int]:
            with stream("POST", url, dialect="openai-chat", json=BODY, headers=headers,
                                 client=h2, trace=trace) as s:
                text = "".join(s.iter_text())
            return text, s.message.last_seq

        return run

    def unbroken_astream(trace: bool) -> Peer:
        async def run() -> tuple[str, int]:
            async with astream("POST", url, dialect="openai-chat", json=BODY,
                                        headers=headers, client=ah2, trace=trace) as s:
                text = "".join([t async for t in s.iter_text()])
            return text, s.message.last_seq

        return lambda: loop.run_until_complete(run())

    def openai_sdk() -> tuple[str, int]:
        parts: list[str] = []
        frames = 0
        chunks = sdk.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True,
            extra_headers=headers,
        )
        for chunk in chunks:
            frames += 1
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
        return "".join(parts), frames

    def httpx_sse_json() -> tuple[str, int]:
        parts: list[str] = []
        frames = 0
        with connect_sse(h1, "POST", url, content=content, headers=headers) as source:
            for event in source.iter_sse():
                frames += 1
                if event.data == "[DONE]":
                    break
                choices = json.loads(event.data)["choices"]
                if choices and choices[0]["delta"].get("content"):
                    parts.append(choices[0]["delta"]["content"])
        return "".join(parts), frames

    return {
        "raw httpx2 iter_raw": ("", raw_httpx2),
        "raw httpx iter_raw": ("", raw_httpx),
        "raw httpx2 aiter_raw": ("", raw_httpx2_async),
        "unbroken.stream": ("raw httpx2 iter_raw", unbroken_stream(True)),
        "unbroken.stream trace=False": ("raw httpx2 iter_raw", unbroken_stream(False)),
        "unbroken.astream": ("raw httpx2 aiter_raw", unbroken_astream(True)),
        "openai SDK": ("raw httpx2 iter_raw", openai_sdk),
        "httpx-sse + json.loads": ("raw httpx iter_raw", httpx_sse_json),
    }


def measure(run: Peer, expected: str, baseline: bool) -> Sample:
    wall, cpu = time.perf_counter(), time.process_time()
    text, _ = run()
    sample = Sample(cpu=time.process_time() - cpu, wall=time.perf_counter() - wall)
    if not baseline and text != expected:
        raise AssertionError(f"wrong text: {len(text)} characters, expected {len(expected)}")
    return sample


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deltas", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", action="store_true",
                        help="profile one unbroken.stream run and one openai SDK run")
    args = parser.parse_args(argv)
    expected = reply_text(0, args.deltas)
    frames = args.deltas + 3  # role chunk, deltas, finish chunk, [DONE]
    with mock_upstream() as base:
        table = peers(base, args.deltas)
        for _name, (_base, run) in table.items():  # warm up: connections, imports, caches
            run()
        samples: dict[str, list[Sample]] = {name: [] for name in table}
        for _ in range(args.repeat):
            for name, (baseline, run) in table.items():
                samples[name].append(measure(run, expected, not baseline))
        if args.profile:
            for name in ("unbroken.stream", "openai SDK"):
                profile(name, table[name][1])
    best = {name: min(s, key=lambda sample: sample.cpu) for name, s in samples.items()}
    report(table, best, frames, args)
    return 0


def report(table: dict[str, tuple[str, Peer]], best: dict[str, Sample], frames: int,
           args: argparse.Namespace) -> None:
    print(f"openai-chat stream of {args.deltas} deltas ({frames} frames) from the mock over "
          f"loopback; best of {args.repeat}; JSON backend {BACKEND}; Python "
          f"{sys.version.split()[0]}; {os.cpu_count()} CPUs")
    overhead = {
        name: (best[name].cpu - best[baseline].cpu) / frames * 1e6
        for name, (baseline, _run) in table.items() if baseline
    }
    reference = overhead["unbroken.stream"]
    print(f"{'peer':<30}{'wall ms':>9}{'cpu ms':>9}{'cpu us/frame':>14}"
          f"{'overhead us/frame':>19}{'x unbroken':>12}")
    for name, (baseline, _run) in table.items():
        sample = best[name]
        row = f"{name:<30}{sample.wall * 1e3:>9.1f}{sample.cpu * 1e3:>9.1f}" \
              f"{sample.cpu / frames * 1e6:>14.2f}"
        if baseline:
            row += f"{overhead[name]:>19.2f}{overhead[name] / reference:>12.2f}"
        print(row)
    sdk = overhead["openai SDK"] / reference
    print(f"\nper-event overhead: openai SDK / unbroken.stream = {sdk:.2f}x "
          f"(target >= 3x: {'met' if sdk >= 3 else 'MISSED'}); httpx-sse + json.loads / "
          f"unbroken.stream = {overhead['httpx-sse + json.loads'] / reference:.2f}x")


def profile(name: str, run: Peer) -> None:
    profiler = cProfile.Profile()
    profiler.runcall(run)
    print(f"\n--- profile: {name} (cumulative, top 25) ---")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    sys.exit(main())
