"""The decisions of one client stream, shared by the sync and async drivers.

A driver is a small loop: ask ``next_request()``, send it, pass the status and headers to
``on_response()``, say ``reading()`` before each read and pass every read to ``receive()``, the
end of the body (clean, broken, or abandoned at a deadline) to ``on_eof()``, and any failure to
``on_failure()``, which answers with a delay before the next attempt or None to stop. The
session reads no clock and does no I/O: drivers pass ``now`` in. The deadlines' own times
(when each counts from, which is due next) are kept by ``DeadlineTimes`` in deadline_times.py.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

from .._receiver import OUTPUT_EVENTS, StreamReceiver
from ..dialects import find_dialect, get_dialect
from ..errors import (
    ContentTypeError,
    ProviderError,
    ProxyInterrupted,
    StreamError,
    StreamTimeout,
    UpstreamStatusError,
    interrupted_by,
)
from ..events import ErrorEvent, Event, MessageStart
from ..finish import Status
from ..framing import FRAMINGS, SSE, Framing, ServerSentEvent
from ..message import Message
from ..resumption import (
    LAST_EVENT_ID,
    STREAM_ID_HEADER,
    Decision,
    Failure,
    ResumeTarget,
    Shown,
    decide,
)
from ..telemetry import Observation
from .capture import CANCELLED, CaptureWriter, ConnectionKind
from .deadline_times import DeadlineTimes
from .policy import (
    RESUME_MODES,
    Deadlines,
    ResumeMode,
    Retry,
    is_retryable,
    server_retry_delay,
)
from .resume_point import background_url, by_position_through_proxy, is_background, last_event_id

__all__ = ["LONGEST_SERVER_DELAY", "Request", "StreamSession"]

# A server asking for a longer pause than this is not worth waiting for inside one call.
LONGEST_SERVER_DELAY = 60.0
_VISIBLE = OUTPUT_EVENTS  # what the caller sees: the output, as time to first chunk counts it


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    url: str
    headers: dict[str, str]
    content: bytes | None
    kind: ConnectionKind


class StreamSession:
    def __init__(
        self,
        method: str,
        url: str,
        *,
        dialect: str,
        content: bytes | None,
        headers: Mapping[str, str],
        retry: Retry,
        resume: ResumeMode,
        deadlines: Deadlines,
        trace: bool,
        started: float,
        capture: CaptureWriter | None = None,
        rng: random.Random | None = None,
        observation: Observation | None = None,
    ) -> None:
        if resume not in RESUME_MODES:
            raise ValueError(f"resume must be one of {', '.join(RESUME_MODES)}, not {resume!r}")
        if dialect != "auto":
            get_dialect(dialect)  # ValueError naming the valid dialects
        self.method = method.upper()
        self.url = url
        self.dialect = dialect
        self.content = content
        self.headers = dict(headers)
        self.retry = retry
        self.resume = resume
        self.deadlines = deadlines
        self.trace = trace
        self.capture = capture
        self.started = started
        self.receiver = StreamReceiver(dialect, trace=trace)
        self.connections = 0
        self.failures = 0  # attempts in a row that made no progress
        self._failing_since: float | None = None  # when the failures in a row began
        self.done = False
        self._rng = rng or random.Random()
        self._kind: ConnectionKind = "first"
        self._times = DeadlineTimes(deadlines, started)
        self._visible = False  # a content delta reached the caller: no more fresh attempts
        # The provider accepted this generation's request (a 2xx): from then on it may be
        # generating, and billing, whether or not a frame came.
        self._answered = False
        self._server_delay: float | None = None
        self._stream_id: str | None = None  # Unbroken-Stream-Id response header
        self._background_id: str | None = None  # an OpenAI background response id
        self._seq_at_connect = -1
        self._reconnection_ms: int | None = None  # the server's SSE retry: hint
        self._last_id = ""  # the SSE id of the last committed frame
        self.observation = observation  # telemetry, None when off (telemetry/)

    @property
    def message(self) -> Message:
        return self.receiver.message

    # -- requests -----------------------------------------------------------------------------

    def next_request(self, now: float) -> Request:
        self.connections += 1
        self._times.connecting(now)
        self._seq_at_connect = self.message.last_seq
        headers = dict(self.headers)
        kind = self._kind
        if kind != "first" and self.observation is not None:
            self.observation.event(f"unbroken.{kind}", now, connection=self.connections,
                                   after_seq=self.message.last_seq)
        if kind == "resume":
            if self._background_id is not None and self._resume_target() == "background":
                return Request("GET", self._background_url(), _without_body_headers(headers),
                               None, kind)
            last_id = self._last_event_id()
            if last_id:
                headers[LAST_EVENT_ID] = last_id
        return Request(self.method, self.url, headers, self.content, kind)

    def socket_read_timeout(self) -> float | None:
        """The longest a single read may block: the larger content deadline (sync driver).

        Content deadlines are checked exactly after every read; a connection that sends no bytes
        at all is cut by this socket deadline.
        """
        return self._times.socket_read_timeout()

    def time_left(self, now: float) -> float | None:
        """Seconds until the nearest deadline (async driver), or None when none applies."""
        return self._times.time_left(now)

    def reading(self, now: float) -> None:
        """The driver is about to wait for bytes: the caller's pause since the last read moves
        the content deadlines (see ``DeadlineTimes.reading``)."""
        self._times.reading(now)

    def next_deadline(self) -> float | None:
        """When the nearest deadline passes (the sync driver's read watchdog), or None."""
        return self._times.next_deadline()

    # -- responses ----------------------------------------------------------------------------

    def on_response(self, status: int, headers: Mapping[str, str], body: bytes = b"") -> None:
        """Check the status and media type; raise ``UpstreamStatusError`` for a non-2xx."""
        if self.capture is not None:
            self.capture.connection(self._kind, status, headers.items())
        if not 200 <= status < 300:
            self._server_delay = server_retry_delay(headers)
            raise UpstreamStatusError(
                status, body.decode("utf-8", "replace"), retry_after=self._server_delay
            )
        self._answered = True
        stream_id = headers.get(STREAM_ID_HEADER)
        if stream_id:
            self._stream_id = stream_id
        media = headers.get("content-type", "").split(";")[0].strip().lower()
        framing = self._framing()
        if framing is not None and framing is not SSE and SSE.accepts(media) and stream_id:
            # Frames served as SSE by an unbroken proxy (GET /v1/streams/{id}/events); from
            # any other server an SSE answer to another framing stays a ContentTypeError.
            framing = SSE
            if self._kind == "resume":
                self.receiver.framing = SSE
            else:
                self.receiver = StreamReceiver(self.dialect, trace=self.trace, framing=SSE)
        framings = (framing,) if framing is not None else FRAMINGS
        expected = tuple(media_type for each in framings for media_type in each.media_types)
        if media not in expected:
            raise ContentTypeError(media, " or ".join(expected))
        if self._kind == "resume":
            after = self.message.last_seq if self._by_position_through_proxy() else None
            self.receiver = self.receiver.reconnect(position_after=after)
        if stream_id:
            self.receiver.proxy_stream = stream_id

    def receive(self, data: bytes, now: float) -> list[Event]:
        """Bytes of the body in, newly committed events out; raises a passed deadline."""
        if self.capture is not None:
            self.capture.read(now - self.started, data)
        out: list[Event] = []
        times = self._times
        outputs = 0  # committed output frames in this read, for telemetry
        for frame in self.receiver.receive_data(data, now - self.started):
            if frame.is_content:
                times.last_content = now
            if not frame.committed:
                continue
            shown = False
            sse = frame.sse
            if sse.__class__ is ServerSentEvent:
                self._last_id = sse.id
                if sse.retry is not None:
                    self._reconnection_ms = sse.retry
            for event in frame.events:
                cls = event.__class__
                if cls in _VISIBLE:
                    self._visible = shown = True
                elif cls is MessageStart:
                    self._note_response_id(event)  # type: ignore[arg-type]
                elif cls is ErrorEvent and not self._visible and event.retryable:  # type: ignore[union-attr]
                    # Nothing shown yet: a fresh attempt may still succeed (overloaded, rate limit).
                    raise ProviderError(event)  # type: ignore[arg-type]
                out.append(event)
            if shown:
                outputs += 1
        if outputs and self.observation is not None:
            self.observation.output(now, outputs)
        if not self.receiver.finished:
            times.check(now)
        times.read_end = now
        return out

    def overdue(self) -> StreamTimeout | None:
        """The deadline that applies now, passed or not (to name a socket timeout)."""
        return self._times.overdue()

    def check_deadlines(self, now: float) -> None:
        """Raise the ``StreamTimeout`` of a deadline passed at ``now``."""
        self._times.check(now)

    def on_eof(self, now: float) -> list[Event]:
        """The body ended. Returns the last events; ``done`` tells whether the stream is over."""
        out: list[Event] = []
        if not self.receiver.finished:
            for frame in self.receiver.receive_eof(now - self.started):
                if frame.committed:
                    out.extend(frame.events)
        if self.message.status is not Status.INTERRUPTED:
            self.done = True
        # Interrupted: not done; the driver reports the cut body to on_failure(), which decides
        # between a resume, a fresh attempt and giving up, as for a broken connection.
        return out

    # -- failures -----------------------------------------------------------------------------

    def on_failure(self, error: StreamError, now: float) -> float | None:
        """Decide what follows a failed attempt: a delay before the next one, or None to stop
        (the message is then closed with ``error``; ``finish()`` raises)."""
        message = self.message
        # Progress is content shown on this connection; frames of a failed fresh attempt are not.
        progressed = self._visible and message.last_seq > self._seq_at_connect
        self.failures = 0 if progressed else self.failures + 1
        if progressed or self._failing_since is None:
            self._failing_since = now
        if message.finish is not None or not is_retryable(error):
            self._give_up(error)
            return None
        server = self._server_delay
        self._server_delay = None
        if server is None and self._reconnection_ms is not None:
            server = self._reconnection_ms / 1000
        delay = self.retry.next_delay(max(self.failures, 1), now - self._failing_since,
                                      server_says=server, rng=self._rng)
        if delay is None or delay > LONGEST_SERVER_DELAY or (
            self.deadlines.total is not None
            and now + delay - self.started >= self.deadlines.total
        ):
            self._give_up(error)
            return None
        target = self._resume_target()
        decision = decide(
            self._failure(error),
            Shown.CONTENT if self._visible else Shown.ANSWERED if self._answered else Shown.NOTHING,
            ResumeTarget.NONE if target is None else ResumeTarget(target),
        )
        if decision is Decision.RESUME:
            self._kind = "resume"
        elif decision is Decision.RETRY or (
            decision is Decision.REGENERATE and self.retry.after_response
        ):
            self._fresh_attempt(error, again=decision is Decision.REGENERATE)
        else:
            if decision is Decision.REGENERATE:
                message.warn("no_regenerate", "not retried: the provider had answered and "
                             "Retry(after_response=False) forbids a second generation")
            self._give_up(error)
            return None
        return delay

    def finish(self, raise_on_error: bool) -> None:
        """The stream is over: close the message, and raise for interrupted / failed."""
        message = self.message
        if not message.closed:
            self.receiver.close()
        self.done = True
        if self.capture is not None:
            error = message.error
            self.capture.end(str(error) if error is not None else None)
        self._observed()
        if not raise_on_error:
            return
        cause = message.error
        if message.status is Status.INTERRUPTED:
            # Also of the cause's type when a deadline or a final status ended it (errors.py).
            err = interrupted_by(
                cause,
                "the stream ended without a finish reason"
                + (f" ({cause})" if cause is not None else "")
                + f"; {len(message.text)} characters of partial text kept",
                message=message,
            )
            raise err from cause
        if message.status is Status.FAILED:
            failure = message.error or StreamError("the stream failed")
            failure.message = message
            raise failure

    def cancel(self) -> None:
        if not self.message.closed:
            self.receiver.close(cancelled=True)
        self.done = True
        if self.capture is not None:
            self.capture.end(CANCELLED)
        self._observed()

    # -- internals ----------------------------------------------------------------------------

    def _observed(self) -> None:
        if self.observation is not None:
            dialect = self.receiver.dialect
            self.observation.end(self.message, frames=self.receiver.frames_seen,
                                 stream_id=self._stream_id or self.receiver.stream_id,
                                 dialect=None if dialect is None else find_dialect(dialect.name))

    def _give_up(self, error: StreamError) -> None:
        message = self.message
        if not message.closed:
            self.receiver.close(error)
        elif message.error is None and message.finish is None:
            # The body's end already closed the message (interrupted): record what cut it.
            message.error = error
            message.warn("error", f"{type(error).__name__}: {error}")
        self.done = True

    def _failure(self, error: StreamError) -> Failure:
        if isinstance(error, ProviderError):
            return Failure.PROVIDER_ERROR
        if isinstance(self.message.error, ProxyInterrupted):
            return Failure.PROXY_ENDED  # the proxy's own frame said its stream ended
        return Failure.BROKEN

    def _fresh_attempt(self, error: StreamError, *, again: bool) -> None:
        """The request again, as a new generation; ``again``: the provider had answered this
        one, so the message counts a second generation and says why."""
        old = self.message
        stream = self._stream_id or self.receiver.stream_id
        self._kind = "retry"
        self.receiver = StreamReceiver(self.dialect, trace=self.trace)
        new = self.message
        new.generations = old.generations
        new.earlier_response_ids = list(old.earlier_response_ids)
        new.warnings += [w for w in old.warnings if w.code == "regenerated"]
        if again:
            new.generations += 1
            new.earlier_response_ids.append(old.id)
            # Through a proxy its word comes first: its stream ended, with nothing shown.
            cause = old.error if isinstance(old.error, ProxyInterrupted) else error
            where = (f" (the proxy's stream {stream} ended {old.status.value} with no content)"
                     if isinstance(cause, ProxyInterrupted) and stream else "")
            new.warn("regenerated", f"generation {new.generations} started: generation "
                     f"{old.generations} (response id {old.id}) was answered, then "
                     f"{type(cause).__name__}: {cause}{where}, before any content")
        self._stream_id = self._background_id = None
        self._answered = False
        self._times.last_content = None  # a new generation: its first event is awaited again

    def _resume_target(self) -> str | None:
        """How this stream can be resumed, or None: never replay a generation after a delta."""
        mode = self.resume
        if mode == "none":
            return None
        verified = self._stream_id is not None or self.receiver.stream_id is not None
        # Through an unbroken proxy its own ids come first: its seqs are not the provider's
        # sequence numbers, and its journal answers without another upstream request.
        if mode == "auto" and verified and self._last_event_id():
            return "sse"
        if (
            mode in ("auto", "openai-background")
            and self._background_id is not None
            and self.receiver.seq_source == "provider"  # starting_after is a sequence_number
        ):
            return "background"
        if mode == "sse":
            return "sse" if self._last_event_id() else None
        return None

    def _last_event_id(self) -> str:
        """The id of the last committed frame: where a resume must continue from."""
        return last_event_id(self.receiver, self.message.last_seq, self._stream_id,
                             self._last_id)

    def _by_position_through_proxy(self) -> bool:
        return by_position_through_proxy(self.receiver, self.message.last_seq, self._stream_id)

    def _note_response_id(self, event: MessageStart) -> None:
        dialect = self.receiver.dialect
        if not event.id or (dialect is not None and not dialect.resumes_upstream):
            return
        if is_background(self.content):
            self._background_id = event.id

    def _background_url(self) -> str:
        assert self._background_id is not None
        return background_url(self.url, self._background_id, self.message.last_seq)

    def _framing(self) -> Framing | None:
        dialect = self.receiver.dialect
        if dialect is None:
            return None
        return self.receiver.framing or dialect.framing


def _without_body_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in ("content-type", "content-length")}

