"""The torture suite's readers of one proxied stream, and the verdict on what each one saw.

Three readers, each given the proxy's base URL (or a fault relay in front of it):

- ``read_sync`` / ``read_async``: ``unbroken.stream`` / ``unbroken.astream`` with their own
  resumes (Retry with quick backoff);
- ``read_raw``: a plain HTTP client that POSTs with an ``Idempotency-Key`` (a POST retried
  before its head attaches to the same stream), then reads ``GET /v1/streams/{id}/events`` with
  ``Last-Event-ID: <id>:<seq>`` after every cut, keeping each frame's seq; a frame without an id
  (the proxy's "frames ran out" notice) is not part of the stream and means "reconnect".

``Verdict.of`` compares a reader's text, frames and status with the proxy's journal
(``GET /v1/streams/{id}``) and the upstream's whole reply.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx2
from tests.integration.test_proxy_support import KEY, Call, message_of

from unbroken.client import Retry, astream, stream
from unbroken.framing import SSEDecoder

__all__ = ["Read", "Verdict", "read_async", "read_raw", "read_sync", "settled_status"]

RETRY = Retry(attempts=8, backoff=0.02, max_backoff=0.5)
RAW_ATTEMPTS = 12
TIMEOUT = httpx2.Timeout(10.0)
AUTH = {"authorization": f"Bearer {KEY}"}


@dataclass(slots=True)
class Read:
    """What one reader saw: the proxy's stream id (the last one, if a fresh request started
    another), its text and status, the seqs of its frames (raw reader only) and how many
    connections it used."""

    stream_id: str | None
    text: str
    status: str
    seqs: list[int] = field(default_factory=list)
    connections: int = 0
    error: str = ""
    streams: int = 1  # proxy streams it read from: more than one is a second generation
    # Generations the reader itself reports (Message.generations); the raw reader never asks
    # for a second one (its POST is retried with one Idempotency-Key).
    generations: int = 1


def read_sync(base: str, call: Call, scenario: str) -> Read:
    seen: list[str] = []

    def hook(response: httpx2.Response) -> None:
        if "unbroken-stream-id" in response.headers:
            seen.append(response.headers["unbroken-stream-id"])

    with (
        httpx2.Client(event_hooks={"response": [hook]}, timeout=TIMEOUT) as http,
        stream("POST", base + call.path, dialect=call.dialect, json=call.body, client=http,
               headers=call.headers(scenario), retry=RETRY, idle_timeout=10,
               first_event_timeout=10, total_timeout=60, raise_on_error=False) as s,
    ):
        text = "".join(s.iter_text())
    error = type(s.message.error).__name__ if s.message.error is not None else ""
    return Read(seen[-1] if seen else None, text, s.message.status.value,
                connections=s.connections, error=error, streams=len(set(seen)),
                generations=s.message.generations)


def read_async(base: str, call: Call, scenario: str) -> Read:
    async def run() -> Read:
        seen: list[str] = []

        async def hook(response: httpx2.Response) -> None:
            if "unbroken-stream-id" in response.headers:
                seen.append(response.headers["unbroken-stream-id"])

        async with (
            httpx2.AsyncClient(event_hooks={"response": [hook]}, timeout=TIMEOUT) as http,
            astream("POST", base + call.path, dialect=call.dialect, json=call.body,
                    client=http, headers=call.headers(scenario), retry=RETRY, idle_timeout=10,
                    first_event_timeout=10, total_timeout=60, raise_on_error=False) as s,
        ):
            text = "".join([piece async for piece in s.iter_text()])
        error = type(s.message.error).__name__ if s.message.error is not None else ""
        return Read(seen[-1] if seen else None, text, s.message.status.value,
                    connections=s.connections, error=error, streams=len(set(seen)),
                    generations=s.message.generations)

    return asyncio.run(run())


def read_raw(base: str, call: Call, scenario: str) -> Read:
    """POST (retried with one Idempotency-Key until a head comes), then the events endpoint
    after the last seq seen, until a body ends cleanly on a frame with an id (or empty)."""
    headers = call.headers(scenario) | {"accept": "text/event-stream",
                                        "idempotency-key": uuid.uuid4().hex}
    stream_id: str | None = None
    frames: list[tuple[int, bytes]] = []  # (seq, the frame's SSE bytes as the proxy sent them)
    connections = 0
    for attempt in range(RAW_ATTEMPTS):
        connections += 1
        if stream_id is None:
            method, url, sent = "POST", base + call.path, headers
        else:
            last = frames[-1][0] if frames else 0
            method, url = "GET", f"{base}/v1/streams/{stream_id}/events"
            sent = AUTH | {"last-event-id": f"{stream_id}:{last}"}
        try:
            with httpx2.stream(method, url, headers=sent, timeout=TIMEOUT,
                               json=call.body if method == "POST" else None) as response:
                if response.status_code == 204:
                    break
                assert response.status_code == 200, (response.status_code, response.read())
                stream_id = response.headers["unbroken-stream-id"]
                if method == "POST" and call.dialect == "ollama":
                    continue  # its POST is NDJSON without ids: read the events endpoint
                if _read_sse(response, frames):
                    break
        except httpx2.TransportError:
            pass
        time.sleep(min(0.02 * 2**attempt, 0.5))
    else:
        return Read(stream_id, "", "reader gave up", [s for s, _ in frames], connections)
    if stream_id is None:
        return Read(None, "", "no stream", [], connections)
    message = message_of(call.dialect, _as_body(call.dialect, [raw for _, raw in frames]))
    return Read(stream_id, message.text, message.status.value, [s for s, _ in frames],
                connections)


def _read_sse(response: httpx2.Response, frames: list[tuple[int, bytes]]) -> bool:
    """Append the frames with ids; True when the body ended cleanly and not on a notice."""
    decoder = SSEDecoder()
    notice = False
    for chunk in response.iter_raw():
        for event in decoder.receive_data(chunk):
            if event.block_id is None:
                notice = True  # not journaled: the stream goes on elsewhere or later
                continue
            frames.append((int(event.block_id.rpartition(":")[2]), event.raw))
    decoder.receive_eof()
    return not notice


def _as_body(dialect: str, raws: list[bytes]) -> bytes:
    if dialect != "ollama":
        return b"".join(raws)
    decoder = SSEDecoder()  # the events endpoint serves Ollama's lines as SSE data
    return b"".join(e.data.encode() + b"\n" for e in decoder.receive_data(b"".join(raws)))


def settled_status(proxy: str, stream_id: str, within: float = 30.0) -> dict[str, Any]:
    """``GET /v1/streams/{id}`` once the stream is no longer ``pending``/``streaming``."""
    deadline = time.monotonic() + within
    while True:
        response = httpx2.get(f"{proxy}/v1/streams/{stream_id}", headers=AUTH, timeout=10)
        assert response.status_code == 200, response.text
        status: dict[str, Any] = response.json()
        if status["status"] not in ("pending", "streaming") or time.monotonic() > deadline:
            return status
        time.sleep(0.05)


@dataclass(frozen=True, slots=True)
class Verdict:
    """One stream's outcome against the proxy's journal and the upstream's whole reply."""

    exact: bool  # completed with the whole reply
    interrupted_with_prefix: bool  # interrupted with exactly the journaled prefix
    whole_deltas: bool  # the journaled text is the first k deltas of the reply, for some k
    duplicated: int
    lost: int
    status_mismatch: bool
    proxy_status: str
    proxy_text: str

    @classmethod
    def of(cls, read: Read, proxy: dict[str, Any], deltas: list[str]) -> Verdict:
        journaled = proxy["text"]
        prefixes = {"".join(deltas[:k]) for k in range(len(deltas) + 1)}
        common = 0
        for mine, theirs in zip(read.text, journaled, strict=False):
            if mine != theirs:
                break
            common += 1
        duplicated = len(read.text) - common
        lost = len(journaled) - common
        if read.seqs:  # a raw reader: frames, by seq
            duplicated += len(read.seqs) - len(set(read.seqs))
            lost += len(set(range(1, proxy["last_seq"] + 1)) - set(read.seqs))
        same = read.text == journaled and not duplicated and not lost
        return cls(
            exact=same and proxy["status"] == "completed" and journaled == "".join(deltas),
            interrupted_with_prefix=same and proxy["status"] == "interrupted",
            whole_deltas=journaled in prefixes,
            duplicated=duplicated,
            lost=lost,
            status_mismatch=read.status != proxy["status"],
            proxy_status=proxy["status"],
            proxy_text=journaled,
        )
