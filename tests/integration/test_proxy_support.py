"""Shared pieces of the proxy's integration tests (this module holds no tests).

``running_proxy(mock)`` serves a proxy in front of the mock under real uvicorn; ``CALLS`` knows,
per dialect, the streaming request and where the mock's text frames sit in its layout (see the
mock's module docstring), so a test can compute the exact text of any prefix of a stream.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
from tests.servers import serve_in_thread

from unbroken._receiver import StreamReceiver
from unbroken.framing import NDJSONDecoder, SSEDecoder
from unbroken.mock import reply_deltas
from unbroken.proxy import ProxyApp, ProxyConfig, create_app
from unbroken.proxy.config import PROVIDERS

DIALECTS = ("openai-chat", "openai-responses", "anthropic", "gemini", "ollama")
KEY = "sk-test-proxy-0001"
OTHER_KEY = "sk-test-proxy-0002"


@dataclass(frozen=True, slots=True)
class Call:
    """One dialect's streaming request through the proxy, and its frame layout."""

    dialect: str
    path: str
    body: dict[str, Any]
    auth_header: str
    first_text: int  # frame number of the first text delta
    extra_frames: int  # frames that are not text deltas (finish=stop, no usage)

    def headers(self, scenario: str, key: str | None = KEY) -> dict[str, str]:
        headers = {"Unbroken-Mock": scenario}
        if key is not None:
            headers[self.auth_header] = f"Bearer {key}" if self.auth_header == "authorization" \
                else key
        return headers

    def total(self, tokens: int) -> int:
        return tokens + self.extra_frames

    def text_after(self, seed: int, tokens: int, frames: int) -> str:
        """The text the first ``frames`` frames carry."""
        count = max(0, min(tokens, frames - self.first_text + 1))
        return "".join(reply_deltas(seed, tokens)[:count])


_MESSAGES = [{"role": "user", "content": "hi"}]
CALLS = {
    "openai-chat": Call("openai-chat", "/v1/chat/completions",
                        {"model": "m", "stream": True, "messages": _MESSAGES},
                        "authorization", 2, 3),
    "openai-responses": Call("openai-responses", "/v1/responses",
                             {"model": "m", "stream": True, "input": "hi"},
                             "authorization", 5, 8),
    "anthropic": Call("anthropic", "/v1/messages",
                      {"model": "m", "stream": True, "max_tokens": 100, "messages": _MESSAGES},
                      "x-api-key", 4, 6),
    "gemini": Call("gemini", "/v1beta/models/gemini-m:streamGenerateContent?alt=sse",
                   {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
                   "x-goog-api-key", 1, 1),
    "ollama": Call("ollama", "/api/chat", {"model": "m", "messages": _MESSAGES},
                   "authorization", 1, 1),
}
# Ollama's other streaming endpoint: the ``ollama`` dialect, the same layout as /api/chat. Not
# in CALLS, whose entries are one per dialect (tests iterate over all of them).
OLLAMA_GENERATE = Call("ollama", "/api/generate", {"model": "m", "prompt": "hi"},
                       "authorization", 1, 1)


def proxy_config(mock: str, **options: Any) -> ProxyConfig:
    options.setdefault("store", "memory://")
    return ProxyConfig(origins=dict.fromkeys(PROVIDERS, mock), **options)


@contextmanager
def running_proxy(mock: str, **options: Any) -> Iterator[tuple[str, ProxyApp]]:
    """A proxy in front of ``mock`` under real uvicorn: ``(base_url, ProxyApp)``."""
    app = create_app(proxy_config(mock, **options))
    with serve_in_thread(app) as base_url:
        yield base_url, app.state.proxy


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def mock_counts(mock: str) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = httpx2.get(mock + "/_mock/requests", timeout=5).json()
    return counts


def frames_of(dialect: str, body: bytes) -> list[Any]:
    """The frames (SSE events or JSON lines) of a whole body."""
    if dialect == "ollama":
        lines = NDJSONDecoder()
        return lines.receive_data(body) + lines.receive_eof()
    events = SSEDecoder()
    return events.receive_data(body) + events.receive_eof()


class FrameReader:
    """Reads whole frames from a streaming response, keeping its place between calls."""

    def __init__(self, response: httpx2.Response, dialect: str) -> None:
        self._chunks = response.iter_raw()
        self._decoder: SSEDecoder | NDJSONDecoder = (
            NDJSONDecoder() if dialect == "ollama" else SSEDecoder()
        )
        self._pending: list[Any] = []

    def take(self, count: int) -> list[Any]:
        """Exactly ``count`` more frames (fails if the body ends first)."""
        while len(self._pending) < count:
            chunk = next(self._chunks, None)
            assert chunk is not None, f"the stream ended after {len(self._pending)} frames"
            self._pending += self._decoder.receive_data(chunk)
        taken, self._pending = self._pending[:count], self._pending[count:]
        return taken

    def rest(self) -> list[Any]:
        """Every frame until the end of the body."""
        for chunk in self._chunks:
            self._pending += self._decoder.receive_data(chunk)
        rest, self._pending = self._pending + self._decoder.receive_eof(), []
        return rest


def read_some(response: httpx2.Response, dialect: str, count: int) -> tuple[bytes, list[Any]]:
    """Read ``count`` whole frames; the bytes of exactly those frames, and the frames."""
    kept = FrameReader(response, dialect).take(count)
    return b"".join(frame.raw for frame in kept), kept


def message_of(dialect: str, *bodies: bytes) -> Any:
    """The ``Message`` the receiver builds from a first body and its resumes.

    An Ollama stream read from the SSE events endpoint is turned back into its JSON lines (the
    receiver reads Ollama as NDJSON only).
    """
    receiver = StreamReceiver(dialect, trace=False)
    for index, body in enumerate(bodies):
        if index:
            receiver = receiver.reconnect()
        if dialect == "ollama" and body.startswith((b"retry:", b"id:")):
            events = SSEDecoder()
            body = b"".join(e.data.encode() + b"\n" for e in events.receive_data(body))
        receiver.receive_data(body)
    if not receiver.finished:  # the proxy's frame that ends a stream ends the receiver too
        receiver.receive_eof()
    return receiver.message


def stream_status(proxy: str, stream_id: str, key: str = KEY) -> dict[str, Any]:
    response = httpx2.get(f"{proxy}/v1/streams/{stream_id}",
                          headers={"authorization": f"Bearer {key}"}, timeout=10)
    assert response.status_code == 200, response.text
    status: dict[str, Any] = response.json()
    return status


def wait_until_ended(proxy: str, stream_id: str, key: str = KEY) -> dict[str, Any]:
    """Block on the events endpoint until the stream ends (no polling), then its status."""
    with httpx2.stream("GET", f"{proxy}/v1/streams/{stream_id}/events",
                       headers={"authorization": f"Bearer {key}"}, timeout=30) as response:
        assert response.status_code in (200, 204)
        for _ in response.iter_raw():
            pass
    return stream_status(proxy, stream_id, key)


def create_and_purge(proxy: str, app: ProxyApp, call: Call) -> tuple[str, str]:
    """Create a short stream and wait (bounded) until the journal purged it: its id, token.
    The proxy must run with a short ``retention`` (seconds) and ``expire_every``."""
    created = httpx2.post(proxy + call.path, json=call.body, headers=call.headers("tokens=2"),
                          timeout=10)
    stream_id = created.headers["unbroken-stream-id"]
    token = created.headers["unbroken-stream-token"]
    deadline = time.monotonic() + 30
    while asyncio.run(app.journal.get(stream_id)) is not None:  # purged, not only expired
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return stream_id, token
