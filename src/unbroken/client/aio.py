"""``unbroken.astream``: the async twin of ``unbroken.stream``, over ``httpx2.AsyncClient``.

Deadlines are exact here: every read waits at most until the nearest deadline (anyio), so a
connection that sends nothing, or only keep-alives, is cut on time.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2

from ..errors import StreamError, StreamTimeout
from ..events import Event, TextDelta
from ..message import Message
from ..telemetry import Observation
from .opening import open_session
from .policy import ResumeMode, Retry
from .session import StreamSession
from .transport import BODY_EXCERPT, as_stream_error, cut_body, default_ssl_context, httpx_timeout

__all__ = ["AsyncStream", "astream"]


class AsyncStream:
    """One logical stream; ``async for event in s`` and ``s.iter_text()``."""

    def __init__(
        self, session: StreamSession, client: httpx2.AsyncClient, raise_on_error: bool
    ) -> None:
        self._session = session
        self._client = client
        self._raise = raise_on_error
        self._events: AsyncIterator[Event] | None = None

    @property
    def message(self) -> Message:
        return self._session.message

    @property
    def connections(self) -> int:
        return self._session.connections

    @property
    def observation(self) -> Observation | None:
        """This stream's telemetry, ``None`` when off (``unbroken.telemetry``)."""
        return self._session.observation

    def __aiter__(self) -> AsyncIterator[Event]:
        if self._events is None:
            self._events = self._run()
        return self._events

    def iter_text(self, *, graphemes: bool = False) -> AsyncIterator[str]:
        """The text deltas; ``graphemes=True`` cuts only between whole user-perceived
        characters (see ``Stream.iter_text``)."""
        texts = self._texts()
        if not graphemes:
            return texts
        from .graphemes import whole_clusters_async  # regex: loaded only by those who ask

        return whole_clusters_async(texts, StreamError)

    async def _texts(self) -> AsyncIterator[str]:
        async for event in self:
            if event.__class__ is TextDelta:
                yield event.text

    async def aclose(self) -> None:
        if self._events is not None:
            await self._events.aclose()  # type: ignore[attr-defined]
        if not self._session.done:
            self._session.cancel()

    async def _run(self) -> AsyncIterator[Event]:
        session = self._session
        while not session.done:
            request = session.next_request(time.monotonic())
            delay: float | None = None
            try:
                async with self._client.stream(
                    request.method,
                    request.url,
                    headers=request.headers,
                    content=request.content,
                    timeout=httpx_timeout(session),
                ) as response:
                    excerpt = b"" if response.is_success else await _excerpt(response)
                    session.on_response(response.status_code, response.headers, excerpt)
                    # aclosing: leaving the block early closes the body reader at once.
                    async with aclosing(self._body(response)) as body:
                        async for event in body:
                            yield event
                if not session.done:
                    raise cut_body()
            except StreamError as err:
                delay = session.on_failure(err, time.monotonic())
            except httpx2.HTTPError as exc:
                delay = session.on_failure(as_stream_error(exc, session), time.monotonic())
            if delay is not None:
                await anyio.sleep(delay)
        session.finish(self._raise)

    async def _body(self, response: httpx2.Response) -> AsyncGenerator[Event, None]:
        """Read one body, each read bounded by the nearest deadline. Its end, clean or broken,
        reaches the receiver (a cut frame's bytes become evidence); then a passed deadline, or
        else the break, is the failure."""
        session = self._session
        chunks = response.aiter_raw()
        broken: httpx2.TransportError | StreamTimeout | None = None
        try:
            while True:
                now = time.monotonic()
                session.reading(now)
                left = session.time_left(now)
                try:
                    if left is None:
                        chunk = await chunks.__anext__()
                    else:
                        # A bare CancelScope costs half of fail_after, once per HTTP chunk.
                        chunk = b""
                        with anyio.CancelScope(deadline=anyio.current_time() + left) as scope:
                            chunk = await chunks.__anext__()
                        if scope.cancelled_caught:
                            # The nearest deadline passed while waiting: that is the failure.
                            overdue = session.overdue()
                            assert overdue is not None  # a deadline was set
                            raise overdue
                except StopAsyncIteration:
                    break
                for event in session.receive(chunk, time.monotonic()):
                    yield event
                if session.receiver.finished:
                    break
        except (httpx2.TransportError, StreamTimeout) as exc:
            broken = exc  # a deadline abandons the body as a break does
        now = time.monotonic()
        for event in session.on_eof(now):
            yield event
        if not session.done:
            if not isinstance(broken, StreamTimeout):
                session.check_deadlines(now)  # it passed while the body broke or ended
            if broken is not None:
                raise broken


async def _excerpt(response: httpx2.Response) -> bytes:
    data = b""
    async for chunk in response.aiter_raw():
        data += chunk
        if len(data) >= BODY_EXCERPT:
            break
    return data[:BODY_EXCERPT]


@asynccontextmanager
async def astream(
    method: str,
    url: str,
    *,
    dialect: str,
    json: Any = None,
    content: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    client: httpx2.AsyncClient | None = None,
    retry: Retry | None = None,
    resume: ResumeMode = "auto",
    connect_timeout: float | None = 10.0,
    first_event_timeout: float | None = 60.0,
    idle_timeout: float | None = 30.0,
    total_timeout: float | None = None,
    raise_on_error: bool = True,
    capture: str | Path | None = None,
    trace: bool = True,
) -> AsyncIterator[AsyncStream]:
    """The async twin of ``unbroken.stream``: ``async with astream(...) as s``."""
    session = open_session(
        method, url, dialect=dialect, json=json, content=content, headers=headers, retry=retry,
        resume=resume, connect_timeout=connect_timeout, first_event_timeout=first_event_timeout,
        idle_timeout=idle_timeout, total_timeout=total_timeout, capture=capture, trace=trace,
    )
    writer = session.capture
    owned = client is None
    http = client if client is not None else httpx2.AsyncClient(verify=default_ssl_context())
    s = AsyncStream(session, http, raise_on_error)
    try:
        yield s
    finally:
        await s.aclose()
        if writer is not None:
            writer.close()
        if owned:
            await http.aclose()
