"""CPU per frame of a proxied stream read through ``ResumingTransport`` vs a plain httpx2 client.

The mock upstream and the proxy (memory journal) each run in their own subprocess on 127.0.0.1,
so their work is not in this process's CPU time; on a machine with two cores or more they are
pinned to one core and this process to another, so that their work does not evict this
process's caches between its reads (each read wakes a cold process otherwise, and the peer with
more Python per read pays more for it, which is noise, not its cost). Every peer POSTs the same
openai-chat stream (``tokens=N``: N text deltas + the role, finish and ``[DONE]`` frames) through
the proxy:

- ``raw``: ``iter_raw`` of the body with a plain ``httpx2.Client`` / with ``http_client()``;
- ``sdk``: the openai SDK reading the stream over each of those two clients (what an app runs).

A second plain raw peer (``raw httpx2 A/A``) measures the noise: two identical clients should
give 1.00, and how far they do not is how far the other ratios can be trusted. A third sends an
``Idempotency-Key`` as the transport does (the proxy's keyed path changes how the body arrives:
``http_client()`` against it is the transport's own cost); and ``own`` is ``ProxiedBody`` alone
over one stream's reads as the plain client got them, without the I/O.

Peers run interleaved, in alternating order, ``--repeat`` rounds, each a fresh stream, after a
``gc.collect()``. Reported as process CPU µs per frame: the median of each peer's runs (the
figure to read: a single stream's CPU time on a shared machine swings by ±15 %, and the median of
interleaved runs is what the A/A pair shows steady) and its best run, each with the transport's
ratio to its peer. No faults: this is the price of being ready to resume, paid by every stream.

    python benchmarks/resuming.py [--frames 1000] [--repeat 60] [--delay-ms 0]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import openai

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script, from anywhere
from benchmarks.processes import free_port

from unbroken import http_client
from unbroken.client.proxied_body import ProxiedBody
from unbroken.mock import reply_text
from unbroken.resumption import IDEMPOTENCY_KEY, STREAM_ID_HEADER

PATH = "/v1/chat/completions"
BODY = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
KEY = "sk-bench-0001"
EXTRA_FRAMES = 3  # role, finish, [DONE]


@contextmanager
def serving(args: list[str], cpus: set[int] | None = None) -> Iterator[str]:
    """``python -m unbroken ARGS --port P`` (on ``cpus``, if given) until the block ends; its
    base URL."""
    port = free_port()
    pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
    server = subprocess.Popen([sys.executable, "-m", "unbroken", *args, "--host", "127.0.0.1",
                               "--port", str(port)], stderr=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, preexec_fn=pin)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx2.get(base + "/", timeout=1)  # any answer: it is up
                break
            except httpx2.TransportError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"{args[0]} did not start") from None
                time.sleep(0.05)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=10)


def pinned() -> set[int] | None:
    """The core the servers get, this process keeping the others; ``None`` on one core."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    os.sched_setaffinity(0, set(cores[1:]))
    return {cores[0]}


Peer = Callable[[], int]  # -> bytes or frames seen, checked against the expected body


def scenario(tokens: int, delay_ms: int) -> str:
    """The mock's scenario header: ``tokens`` deltas, ``delay_ms`` before every frame but the
    first (0: one burst, many frames per read; 1+: about one frame per read, as a model sends)."""
    return f"tokens={tokens}; delay_ms={delay_ms}" if delay_ms else f"tokens={tokens}"


def peers(base: str, tokens: int, delay_ms: int = 0) -> dict[str, Peer]:
    url = base + PATH
    mock = scenario(tokens, delay_ms)
    headers = {"Unbroken-Mock": mock, "authorization": f"Bearer {KEY}"}
    content = json.dumps(BODY).encode()
    plain, resuming = httpx2.Client(timeout=60), http_client(timeout=60)

    def raw(client: httpx2.Client, keyed: bool = False) -> Peer:
        def run() -> int:
            sent = {**headers, IDEMPOTENCY_KEY: f"ub-{secrets.token_hex(16)}"} if keyed else headers
            with client.stream("POST", url, content=content, headers=sent) as response:
                assert response.status_code == 200
                return sum(len(chunk) for chunk in response.iter_raw())

        return run

    def sdk(client: httpx2.Client) -> Peer:
        openai_client = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0,
                                      http_client=client)

        def run() -> int:
            parts: list[str] = []
            for chunk in openai_client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True,
                extra_headers={"Unbroken-Mock": mock},
            ):
                if chunk.choices and chunk.choices[0].delta.content:
                    parts.append(chunk.choices[0].delta.content)
            assert "".join(parts) == reply_text(0, tokens)
            return len(parts)

        return run

    return {"raw httpx2": raw(plain), "raw http_client()": raw(resuming),
            "raw httpx2 A/A": raw(plain), "raw httpx2 keyed": raw(plain, keyed=True),
            "sdk httpx2": sdk(plain), "sdk http_client()": sdk(resuming)}


def recorded(base: str, tokens: int, delay_ms: int = 0) -> tuple[str, list[bytes]]:
    """One stream's stream id and its body's reads, as a plain client got them."""
    headers = {"Unbroken-Mock": scenario(tokens, delay_ms), "authorization": f"Bearer {KEY}"}
    with httpx2.Client(timeout=60) as client, client.stream(
        "POST", base + PATH, content=json.dumps(BODY).encode(), headers=headers
    ) as response:
        return response.headers[STREAM_ID_HEADER], list(response.iter_raw())


def cutting(stream_id: str, reads: list[bytes]) -> Peer:
    """The transport's own work on those reads, without the I/O (``ProxiedBody``)."""

    def run() -> int:
        body = ProxiedBody(stream_id, ndjson=False)
        for chunk in reads:
            body.receive(chunk)
        assert body.receive_eof()
        return body.seq

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=60)
    parser.add_argument("--delay-ms", type=int, default=0,
                        help="the mock pauses this long before each frame: about one frame "
                             "per read (0: the whole stream in one burst)")
    options = parser.parse_args()
    tokens = options.frames - EXTRA_FRAMES
    servers = pinned()
    with serving(["mock"], servers) as mock, serving(
        ["proxy", "--upstream", mock, "--store", "memory://", "--log-level", "warning"], servers
    ) as proxy:
        runs = peers(proxy, tokens, options.delay_ms)
        seen = {name: run() for name, run in runs.items()}  # warm up, and check alike
        assert seen["raw httpx2"] == seen["raw http_client()"], seen
        reads = recorded(proxy, tokens, options.delay_ms)
        order = [*runs.items(), ("own", cutting(*reads))]
        times: dict[str, list[float]] = {name: [] for name, _ in order}
        for _ in range(options.repeat):
            order.reverse()  # neither peer of a pair always runs first
            for name, run in order:
                gc.collect()  # a collection left over by the peer before is not this one's
                started = time.process_time()
                run()
                times[name].append(time.process_time() - started)
    pace = f", {options.delay_ms} ms before each frame" if options.delay_ms else ", one burst"
    print(f"{options.frames} frames per stream{pace}, {options.repeat} interleaved runs"
          f"{'' if servers is None else ', servers pinned to another core'}; process CPU µs "
          f"per frame, median (best):")
    for statistic in (statistics.median, min):
        per_frame = {name: statistic(seconds) / options.frames * 1e6
                     for name, seconds in times.items()}
        label = "median" if statistic is statistics.median else "best"
        for kind in ("raw", "sdk"):
            base, through = per_frame[f"{kind} httpx2"], per_frame[f"{kind} http_client()"]
            print(f"  {label:<6} {kind:<4} httpx2 {base:7.2f}   http_client() {through:7.2f}   "
                  f"ratio {through / base:.3f}   (+{through - base:.2f} µs/frame)")
        keyed = per_frame["raw httpx2 keyed"]
        print(f"  {label:<6} key  httpx2 {keyed:7.2f} with an Idempotency-Key as http_client() "
              f"sends: http_client() / it {per_frame['raw http_client()'] / keyed:.3f}")
        again = per_frame["raw httpx2 A/A"]
        print(f"  {label:<6} A/A  httpx2 {per_frame['raw httpx2']:7.2f}   httpx2        "
              f"{again:7.2f}   ratio {again / per_frame['raw httpx2']:.3f}   (noise: the same "
              f"client twice)")
        print(f"  {label:<6} own  ProxiedBody alone over one stream's reads as the plain client "
              f"got them ({len(reads[1])}): {per_frame['own']:.3f} µs/frame")


if __name__ == "__main__":
    main()
