"""Shared pieces of the client's integration tests (this module holds no tests).

``run_stream(driver, ...)`` streams one request through ``unbroken.stream`` (driver ``"sync"``) or
``unbroken.astream`` (driver ``"async"``) and returns a ``Run``: the message, the events and text
deltas the caller saw, the error raised, and every HTTP request the client sent. Tests are async
(``@pytest.mark.anyio``) and parametrized over ``DRIVERS``; the sync driver simply blocks the test's
event loop, the mock runs in its own thread.

``LAYOUTS`` knows, per dialect, where the mock's text frames sit (see ``unbroken.mock``'s
docstring), so a test computes the exact text of any prefix of a stream from ``reply_deltas``
instead of trusting the parser under test.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2

from unbroken.client import Retry, astream, stream
from unbroken.errors import StreamError
from unbroken.events import Event, TextDelta
from unbroken.message import Message
from unbroken.mock import reply_deltas

__all__ = [
    "BODIES",
    "DIALECTS",
    "DRIVERS",
    "FAST_RETRY",
    "LAYOUTS",
    "SSE_DIALECTS",
    "Layout",
    "Run",
    "SentRequest",
    "mock_counts",
    "raw_body",
    "reset_mock",
    "run_stream",
]

DIALECTS = ("openai-chat", "openai-responses", "anthropic", "gemini", "ollama")
SSE_DIALECTS = DIALECTS[:4]
DRIVERS = ("sync", "async")
FAST_RETRY = Retry(attempts=3, backoff=0.01, max_backoff=0.05, budget=None)


@dataclass(frozen=True, slots=True)
class Layout:
    """One dialect's streaming endpoint and frame layout (finish=stop, no usage chunk)."""

    dialect: str
    path: str
    first_text: int  # frame number of the first text delta
    extra_frames: int  # frames that are not text deltas

    def url(self, base: str) -> str:
        return base + self.path

    def total(self, tokens: int) -> int:
        return tokens + self.extra_frames

    def last_text(self, tokens: int) -> int:
        return self.first_text + tokens - 1

    def seq_of(self, frame: int) -> int:
        """The seq the client gives frame number ``frame``: Responses number their frames
        themselves (``sequence_number``, from 0); the others count frames from 1."""
        return frame - 1 if self.dialect == "openai-responses" else frame

    def text_after(self, frames: int, tokens: int, seed: int = 0) -> str:
        """The text the first ``frames`` frames carry."""
        count = max(0, min(tokens, frames - self.first_text + 1))
        return "".join(reply_deltas(seed, tokens)[:count])


LAYOUTS = {
    "openai-chat": Layout("openai-chat", "/v1/chat/completions", 2, 3),
    "openai-responses": Layout("openai-responses", "/v1/responses", 5, 8),
    "anthropic": Layout("anthropic", "/v1/messages", 4, 6),
    "gemini": Layout("gemini", "/v1beta/models/g:streamGenerateContent?alt=sse", 1, 1),
    "ollama": Layout("ollama", "/api/chat", 1, 1),
}
# The body each dialect streams with; the mock only looks at "stream" and "background".
BODIES: dict[str, dict[str, Any]] = {
    "openai-chat": {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
    "openai-responses": {"model": "m", "stream": True, "input": "hi"},
    "anthropic": {"model": "m", "stream": True, "max_tokens": 64,
                  "messages": [{"role": "user", "content": "hi"}]},
    "gemini": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
    "ollama": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
}


@dataclass(frozen=True, slots=True)
class SentRequest:
    method: str
    url: str
    last_event_id: str | None
    scenario: str | None


@dataclass(slots=True)
class Run:
    """What one ``stream``/``astream`` block produced."""

    message: Message
    connections: int
    events: list[Event]
    error: StreamError | None
    requests: list[SentRequest] = field(default_factory=list)

    @property
    def shown(self) -> str:
        """The text deltas the caller saw, joined: what a UI would have printed."""
        return "".join(e.text for e in self.events if isinstance(e, TextDelta))


# Building an SSL context loads the CA bundle (~60 ms): once for the whole run, not per client.
SSL_CONTEXT = ssl.create_default_context()
_CONTROL = httpx2.Client(verify=SSL_CONTEXT, timeout=5)


def mock_counts(base: str) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = _CONTROL.get(base + "/_mock/requests").json()
    return counts


def raw_body(base: str, dialect: str, scenario: str) -> bytes:
    """The body the mock streams for this request, read whole with plain httpx2 (for offsets).

    The request body is serialized as the client does it, because the mock's ids hash it."""
    response = _CONTROL.post(
        LAYOUTS[dialect].url(base),
        content=json.dumps(BODIES[dialect], ensure_ascii=False).encode(),
        headers={"Unbroken-Mock": scenario, "content-type": "application/json"},
    )
    assert response.status_code == 200
    return response.content


def reset_mock(base: str) -> str:
    """Clear the mock's counters and stored responses; returns ``base``."""
    assert _CONTROL.post(base + "/_mock/reset").status_code == 200
    return base


class _Recorder:
    """Records each request and sets its scenario: the n-th request gets ``scenarios[n]`` (the
    last one repeats), so a test can make only the first attempt fail."""

    def __init__(self, scenarios: Sequence[str]) -> None:
        self.scenarios = list(scenarios)
        self.sent: list[SentRequest] = []

    def on_request(self, request: httpx2.Request) -> None:
        if self.scenarios:
            index = min(len(self.sent), len(self.scenarios) - 1)
            request.headers["Unbroken-Mock"] = self.scenarios[index]
        self.sent.append(
            SentRequest(
                request.method,
                str(request.url),
                request.headers.get("last-event-id"),
                request.headers.get("unbroken-mock"),
            )
        )

    async def on_request_async(self, request: httpx2.Request) -> None:
        self.on_request(request)


async def run_stream(
    driver: str,
    url: str,
    *,
    dialect: str,
    scenario: str | Sequence[str] = (),
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    stop_after: int | None = None,
    caller_pause: float = 0.0,
    **options: Any,
) -> Run:
    """Stream ``url`` with ``driver`` and collect everything; ``stop_after=n`` leaves the block
    after the n-th text delta; ``caller_pause`` is how long the caller dwells on each event
    (``time.sleep`` in the sync driver, ``anyio.sleep`` in the async one). ``scenario`` is one
    scenario or one per attempt."""
    scenarios = [scenario] if isinstance(scenario, str) else list(scenario)
    recorder = _Recorder(scenarios)
    options.setdefault("retry", FAST_RETRY)
    kwargs: dict[str, Any] = {
        "dialect": dialect,
        "json": BODIES[dialect] if body is None else body,
        "headers": headers,
        **options,
    }
    events: list[Event] = []
    error: StreamError | None = None
    if driver == "sync":
        with httpx2.Client(
            verify=SSL_CONTEXT, event_hooks={"request": [recorder.on_request]}
        ) as client:
            try:
                with stream("POST", url, client=client, **kwargs) as s:
                    for event in s:
                        events.append(event)
                        if caller_pause:
                            time.sleep(caller_pause)
                        if _should_stop(events, stop_after):
                            break
            except StreamError as err:
                error = err
            return Run(s.message, s.connections, events, error, recorder.sent)
    assert driver == "async", driver
    async with httpx2.AsyncClient(
        verify=SSL_CONTEXT, event_hooks={"request": [recorder.on_request_async]}
    ) as aclient:
        try:
            async with astream("POST", url, client=aclient, **kwargs) as a:
                async for event in a:
                    events.append(event)
                    if caller_pause:
                        await anyio.sleep(caller_pause)
                    if _should_stop(events, stop_after):
                        break
        except StreamError as err:
            error = err
        return Run(a.message, a.connections, events, error, recorder.sent)


def _should_stop(events: list[Event], stop_after: int | None) -> bool:
    if stop_after is None or not isinstance(events[-1], TextDelta):
        return False
    return sum(1 for e in events if isinstance(e, TextDelta)) >= stop_after
