"""``unbroken.stream``: a blocking client over ``httpx2.Client``."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2

from ..errors import StreamError, StreamTimeout
from ..events import Event, TextDelta
from ..message import Message
from .opening import open_session
from .policy import ResumeMode, Retry
from .session import StreamSession
from .transport import (
    BODY_EXCERPT,
    ReadWatchdog,
    as_stream_error,
    cut_body,
    default_ssl_context,
    httpx_timeout,
)

__all__ = ["Stream", "stream"]


class Stream:
    """One logical stream, across however many connections it takes.

    Iterate it for normalized events (each frame at most once), or ``iter_text()`` for text
    deltas. ``message`` is the ``Message``; it is closed when the ``with`` block ends.
    """

    def __init__(self, session: StreamSession, client: httpx2.Client, raise_on_error: bool):
        self._session = session
        self._client = client
        self._raise = raise_on_error
        self._events: Iterator[Event] | None = None
        self._watchdog = ReadWatchdog()

    @property
    def message(self) -> Message:
        return self._session.message

    @property
    def connections(self) -> int:
        """Connections made so far: the first, retries and resumes."""
        return self._session.connections

    def __iter__(self) -> Iterator[Event]:
        if self._events is None:
            self._events = self._run()
        return self._events

    def iter_text(self, *, graphemes: bool = False) -> Iterator[str]:
        """The text deltas, as they come. ``graphemes=True`` cuts only between whole
        user-perceived characters: a cluster a delta split (🧑🏿‍💻, 1️⃣, a flag) comes out whole,
        the last one once text after it or the end shows it complete (``client.graphemes``).
        A held cluster still comes out before the stream's error is raised."""
        texts = (event.text for event in self if event.__class__ is TextDelta)
        if not graphemes:
            return texts
        from .graphemes import whole_clusters  # regex: loaded only by those who ask

        return whole_clusters(texts, StreamError)

    def close(self) -> None:
        """Stop reading; a message not yet ended is ``cancelled``."""
        if self._events is not None:
            self._events.close()  # type: ignore[attr-defined]
        self._watchdog.close()
        if not self._session.done:
            self._session.cancel()

    def _run(self) -> Iterator[Event]:
        session = self._session
        while not session.done:
            request = session.next_request(time.monotonic())
            delay: float | None = None
            try:
                with self._client.stream(
                    request.method,
                    request.url,
                    headers=request.headers,
                    content=request.content,
                    timeout=httpx_timeout(session),
                ) as response:
                    excerpt = b"" if response.is_success else _excerpt(response)
                    session.on_response(response.status_code, response.headers, excerpt)
                    yield from self._body(response)
                if not session.done:
                    raise cut_body()
            except StreamError as err:
                delay = session.on_failure(err, time.monotonic())
            except httpx2.HTTPError as exc:
                delay = session.on_failure(as_stream_error(exc, session), time.monotonic())
            if delay is not None:
                time.sleep(delay)
        self._watchdog.close()
        session.finish(self._raise)

    def _body(self, response: httpx2.Response) -> Iterator[Event]:
        """Read one body. Its end, clean or broken, reaches the receiver (a cut frame's bytes
        become evidence); then a passed deadline, or else the break, is the failure."""
        session = self._session
        watchdog = self._watchdog
        sock = watchdog.socket_of(response)
        chunks = response.iter_raw()
        broken: httpx2.TransportError | StreamTimeout | None = None
        try:
            while True:
                session.reading(time.monotonic())
                watchdog.arm(sock, session.next_deadline())
                try:
                    chunk = next(chunks, None)
                finally:
                    watchdog.disarm()
                if chunk is None:
                    break
                yield from session.receive(chunk, time.monotonic())
                if session.receiver.finished:
                    break
        except (httpx2.TransportError, StreamTimeout) as exc:
            broken = exc  # a deadline abandons the body as a break does
        now = time.monotonic()
        yield from session.on_eof(now)
        if not session.done:
            if not isinstance(broken, StreamTimeout):
                session.check_deadlines(now)  # it passed while the body broke or ended
            if broken is not None:
                raise broken


def _excerpt(response: httpx2.Response) -> bytes:
    data = b""
    for chunk in response.iter_raw():
        data += chunk
        if len(data) >= BODY_EXCERPT:
            break
    return data[:BODY_EXCERPT]


@contextmanager
def stream(
    method: str,
    url: str,
    *,
    dialect: str,
    json: Any = None,
    content: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    client: httpx2.Client | None = None,
    retry: Retry | None = None,
    resume: ResumeMode = "auto",
    connect_timeout: float | None = 10.0,
    first_event_timeout: float | None = 60.0,
    idle_timeout: float | None = 30.0,
    total_timeout: float | None = None,
    raise_on_error: bool = True,
    capture: str | Path | None = None,
    trace: bool = True,
) -> Iterator[Stream]:
    """Stream one LLM response with deadlines, safe retries and verified resumes.

    ``for event in s`` yields normalized events; the loop ends normally for completed,
    truncated and filtered messages and raises ``Interrupted`` / ``ProviderError`` (or the
    ``StreamTimeout``, ``UpstreamStatusError``, protocol error that ended it) otherwise, unless
    ``raise_on_error=False``. Leaving the block early ends the message ``cancelled``.
    """
    session = open_session(
        method, url, dialect=dialect, json=json, content=content, headers=headers, retry=retry,
        resume=resume, connect_timeout=connect_timeout, first_event_timeout=first_event_timeout,
        idle_timeout=idle_timeout, total_timeout=total_timeout, capture=capture, trace=trace,
    )
    writer = session.capture
    owned = client is None
    http = client if client is not None else httpx2.Client(verify=default_ssl_context())
    s = Stream(session, http, raise_on_error)
    try:
        yield s
    finally:
        s.close()
        if writer is not None:
            writer.close()
        if owned:
            http.close()
