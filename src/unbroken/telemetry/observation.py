"""``Observation``: what one stream's hooks tell telemetry, kept until the stream ends.

The hooks in the client, the SDK wrappers, the proxy and ``unbroken.server`` hold an
``Observation`` (or ``None`` when telemetry is off) and tell it three things: an output frame
arrived (``output``: for time to first chunk and time per output chunk), something happened to
the stream (``event``: a resume, a retry), and the stream ended (``end``, with its ``Message``).
Nothing is written while the stream runs: at the end the recorder turns the whole observation
into one span and its metrics, so a resume can never count a second operation, and the
per-frame cost is a method call that keeps two times and a count.

This module reads no ``opentelemetry``; ``otel.py`` is the recorder that does.
"""

from __future__ import annotations

import json
import logging
import time
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, urlsplit

from ..dialects import DIALECTS

if TYPE_CHECKING:
    from ..dialects.base import DialectBase
    from ..message import Message

__all__ = ["HELD_INTERVALS", "Observation", "StreamRecorder", "json_object", "operation_name",
           "request_model", "server_of"]

_log = logging.getLogger("unbroken.telemetry")


# How many chunk intervals an observation holds (8 bytes each) before it hands them to the
# recorder mid-stream, when every chunk's interval is recorded: the bound of its buffer.
HELD_INTERVALS = 8192


class StreamRecorder(Protocol):
    capture_content: bool  # whether the span gets the completion (it needs the message's text)
    each_chunk: bool  # one time-per-output-chunk point per chunk (else one per stream, the mean)

    def parent(self, headers: Sequence[tuple[str, str]] | None = None) -> Any:
        """The context the stream's span will be a child of (taken when it starts): the one a
        request's W3C ``traceparent`` header carries, else the current one."""
        ...

    def trace_headers(self, parent: Any) -> dict[str, str]:
        """The W3C trace-context headers that carry ``parent`` to a server (none when it
        holds no span)."""
        ...

    def record(self, observation: Observation, message: Message) -> None:
        """Write the ended stream: its span and its metrics."""
        ...

    def record_chunks(self, observation: Observation) -> None:
        """Write the chunk intervals held so far (``each_chunk``: the buffer is full) and
        empty the buffer."""
        ...


class Observation:
    """One stream, from its request (``started``, monotonic seconds) to its end."""

    __slots__ = ("_recorder", "body", "component", "dialect", "ended_at", "events",
                 "first_output", "frames", "intervals", "last_output", "outputs", "parent",
                 "same_read", "started", "started_ns", "stream_id", "url")

    def __init__(
        self,
        recorder: StreamRecorder,
        component: str,
        *,
        dialect: type[DialectBase] | None = None,
        url: str | None = None,
        body: bytes | None = None,
        started: float | None = None,
        headers: Sequence[tuple[str, str]] | None = None,
    ) -> None:
        now = time.monotonic()
        self._recorder = recorder
        self.component = component
        self.dialect = dialect
        self.url = url
        self.body = body
        self.started = now if started is None else started
        self.started_ns = time.time_ns() - int((now - self.started) * 1e9)
        self.parent = recorder.parent(headers)
        self.outputs = 0  # output frames
        self.first_output: float | None = None  # monotonic receive time of the first
        self.last_output = 0.0  # and of the last
        # Each chunk's interval, when the recorder wants one point per chunk: the gap from the
        # previous output read, and ``same_read`` more of zero (frames completed by one read).
        self.intervals: array[float] | None = array("d") if recorder.each_chunk else None
        self.same_read = 0
        self.events: list[tuple[str, float, dict[str, Any]]] = []
        self.frames = 0
        self.stream_id: str | None = None
        self.ended_at: float | None = None

    @property
    def needs_text(self) -> bool:
        """Whether the ended message must still hold its text (content capture is on): a
        producer that keeps none (``Message(keep_text=False)``) keeps it then."""
        return self._recorder.capture_content

    def output(self, t: float, frames: int = 1) -> None:
        """``frames`` output frames (``_receiver.OUTPUT_EVENTS``) were received at monotonic
        ``t`` (one read may complete several); frames dropped as duplicates are not output."""
        intervals = self.intervals
        if self.first_output is None:
            self.first_output = t
        elif intervals is not None:
            intervals.append(t - self.last_output)
        self.last_output = t
        self.outputs += frames
        if intervals is not None:
            self.same_read += frames - 1
            if len(intervals) >= HELD_INTERVALS:
                self._recorder.record_chunks(self)

    def trace_headers(self) -> dict[str, str]:
        """Headers for the stream's requests that carry the caller's trace (``traceparent``):
        an unbroken proxy's span then joins it, beside this stream's own span."""
        return self._recorder.trace_headers(self.parent)

    def event(self, name: str, t: float | None = None, **attributes: Any) -> None:
        """A span event (``unbroken.resume``, ``unbroken.retry``) at monotonic ``t``."""
        self.events.append((name, time.monotonic() if t is None else t, attributes))

    def end(
        self,
        message: Message,
        *,
        frames: int | None = None,
        stream_id: str | None = None,
        dialect: type[DialectBase] | None = None,
        t: float | None = None,
    ) -> None:
        """The stream ended (``message`` is closed): record it once; later calls do nothing.
        A recorder's failure is logged, never raised into the stream."""
        if self.ended_at is not None:
            return
        self.ended_at = time.monotonic() if t is None else t
        if frames is not None:
            self.frames = frames
        if stream_id is not None:
            self.stream_id = stream_id
        if dialect is not None:
            self.dialect = dialect
        try:
            self._recorder.record(self, message)
        except Exception:
            _log.exception("unbroken.telemetry: recording a stream failed")
        self.body = None  # the request is not kept past the end

    def ns(self, t: float) -> int:
        """Monotonic seconds as the epoch nanoseconds a span carries."""
        return self.started_ns + int((t - self.started) * 1e9)

    def resolved_dialect(self) -> type[DialectBase] | None:
        """The dialect told, else the one whose route claims the URL's path."""
        if self.dialect is not None or self.url is None:
            return self.dialect
        path = urlsplit(self.url).path
        return next((cls for cls in DIALECTS if cls.route.claims("POST", path)), None)


def operation_name(dialect: type[DialectBase], url: str | None) -> str:
    """``gen_ai.operation.name``: the dialect's, or the one its route gives this path."""
    if url is not None:
        by_path = dialect.genai_path_operations.get(urlsplit(url).path)
        if by_path is not None:
            return by_path
    return dialect.genai_operation


def json_object(body: bytes | None) -> dict[str, Any] | None:
    """A request body that is a JSON object, parsed; ``None`` for anything else."""
    if not body or body[:1] != b"{":
        return None
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def request_model(dialect: type[DialectBase] | None, url: str | None,
                  request: dict[str, Any] | None) -> str | None:
    """``gen_ai.request.model``: in the path where the provider puts it (Gemini, Bedrock), else
    the request body's ``model`` (``json_object``); ``None`` when neither says."""
    if dialect is not None and url is not None:
        in_path = dialect.route.model_of(urlsplit(url).path)
        if in_path is not None:
            return unquote(in_path)
    model = None if request is None else request.get("model")
    return model if isinstance(model, str) and model else None


def server_of(url: str | None) -> tuple[str | None, int | None]:
    """``server.address`` and ``server.port`` of a URL (the scheme's port when none is given)."""
    if url is None:
        return None, None
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # not a port: none is known
        return parts.hostname, None
    if port is None and parts.scheme in ("http", "https"):
        port = 443 if parts.scheme == "https" else 80
    return parts.hostname, port
