"""``Producer``: the task that reads one upstream stream, once, into the journal.

It does not depend on any client connection: readers come and go through the journal. Per turn
of the event loop: the chunks read -> ``StreamReceiver.receive_data`` once -> frames -> one
journal append (committed with every other stream's in one group commit) -> readers woken. The
producer never waits for a commit to read on; readers are woken only after the commit that holds
their frames. Frames are numbered 1, 2, 3 ... by the proxy (pings and ``[DONE]`` included; SSE
comments are not frames).

When the upstream breaks before a finish reason, a Responses background stream is continued
upstream (``GET /v1/responses/{id}?stream=true&starting_after=N``, frames deduplicated by
``sequence_number``) so readers see one seamless stream. Otherwise, and after a cancel or a
malformed body, the stream ends with one synthetic frame in the dialect's error format (which
one, and the usage and error its state journals: ``stream_outcome.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx2

from .. import telemetry
from .._receiver import Frame, StreamReceiver
from ..dialects import dialect_class
from ..dialects.openai_chat import is_usage_only_chunk
from ..errors import IdleTimeout, StreamError, TransportError
from ..events import TextDelta, Usage
from ..finish import Status
from ..framing import SSE
from ..message import Message
from ..resumption import ProxyMark
from ..streams.journal import FrameRecord, Journal, LiveTail, StreamMeta, StreamState
from ..streams.logs import log_event
from ..streams.stream_outcome import closing_error, error_fields, usage_fields
from .config import ProxyConfig
from .journal_failures import JOURNAL_ERRORS
from .metrics import ProxyMetrics
from .wire import error_frame

__all__ = ["Producer", "UpstreamRequest"]

log = logging.getLogger("unbroken.proxy")

_MAX_IN_FLIGHT = 4096  # frames submitted but not yet committed before the reader waits
_PROGRESS_EVERY = 1.0  # seconds a live state may be reused while only progress changes
_RESUME_BACKOFF_S = 0.1
_RESUME_BACKOFF_MAX_S = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamRequest:
    """The request a stream came from. Held in memory by the producer only: its headers carry
    the credential, which is never journaled."""

    url: str
    headers: list[tuple[str, str]]
    body: bytes
    origin: str
    background: bool = False
    # The proxy added OpenAI chat's ``stream_options.include_usage`` (the client did not set
    # it): the usage-only chunk that answers is not the client's, see ``Producer._submit``.
    usage_asked: bool = False


class Producer:
    """Reads the upstream response of one stream into the journal until the stream ends."""

    # One per live stream: slots keep it at a few hundred bytes instead of a ~1.6 KiB dict.
    __slots__ = (
        "_client", "_commit_error", "_config", "_drain_scheduled", "_ending", "_epoch",
        "_first_chunk_seen", "_idle_timer", "_in_flight", "_inbox", "_journal", "_key",
        "_last_commit", "_metrics", "_progress", "_provider_seq", "_receiver", "_request",
        "_requested", "_response", "_spec", "_sse", "_started", "_stop_reason", "dialect",
        "observation", "seq", "stream_id", "task", "upstream_requests",
    )

    def __init__(
        self,
        *,
        journal: Journal,
        client: httpx2.AsyncClient,
        config: ProxyConfig,
        meta: StreamMeta,
        tail: LiveTail,
        request: UpstreamRequest,
        response: httpx2.Response | None,
        metrics: ProxyMetrics | None = None,
        requested: float | None = None,
    ) -> None:
        """``response=None``: the stream is continued upstream (see ``continue_after``).

        ``metrics``: told the time to the first output frame and to the end, counted from
        ``requested`` (the monotonic time the upstream request was sent). Only the producer
        that made the stream's first request is given them: one that continues a stream
        started elsewhere would count a second operation."""
        self.stream_id = meta.stream_id
        self.dialect = meta.dialect
        self._journal = journal
        self._client = client
        self._config = config
        self._request = request
        self._response = response
        self._spec = dialect_class(meta.dialect)
        self._sse = self._spec.framing is SSE
        self.seq = 0  # the proxy's own frame counter
        self._provider_seq = -1  # highest Responses sequence_number forwarded
        self.upstream_requests = 1
        self._stop_reason: str | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._last_commit: asyncio.Future[Any] | None = None
        self._progress: StreamState | None = None  # the last state submitted while live
        self._key: tuple[Any, ...] = ()  # what that state was made from
        self._commit_error: BaseException | None = None
        self._in_flight = 0
        self._ending = False
        self._inbox: list[bytes] = []  # chunks read this turn, parsed by _drain
        self._drain_scheduled = False
        self.task: asyncio.Task[None] | None = None
        self._started = time.monotonic()
        self._metrics = metrics
        self._requested = self._started if requested is None else requested
        self._first_chunk_seen = metrics is None  # nothing to tell without metrics
        # Telemetry (None when off) observes the stream's operation: as the metrics, only the
        # producer that made its first request, or a continuation would be a second one.
        self.observation = None if metrics is None else telemetry.observe(
            "proxy", dialect=self._spec, url=request.url, body=request.body,
            started=self._requested, headers=request.headers)
        # The journal keeps each frame's text: the message keeps none (a live stream would
        # otherwise hold a second copy of all its text until it ends), unless the span is to
        # carry the completion.
        keep_text = self.observation is not None and self.observation.needs_text
        self._receiver = StreamReceiver(
            meta.dialect, max_event_size=config.max_event_size,
            message=Message(trace=False, keep_text=keep_text),
        )
        # Frames carry the monotonic time of the read that completed them; this turns it into
        # the epoch seconds journaled as their receive time (no clock read per frame).
        self._epoch = time.time() - self._started
        tail.on_readers = self._readers_changed

    # -- control ------------------------------------------------------------------------------

    def start(self) -> asyncio.Task[None]:
        self.task = asyncio.get_running_loop().create_task(
            self.run(), name=f"unbroken-producer-{self.stream_id}"
        )
        return self.task

    def stop(self, reason: str = "cancelled") -> None:
        """Stop reading: ``"cancelled"`` (a caller asked) ends the stream ``cancelled``; any
        other reason (``"shutdown"``) ends it ``interrupted``."""
        if self.task is not None and not self.task.done():
            self._stop_reason = self._stop_reason or reason
            self.task.cancel()

    def continue_after(self, receiver: StreamReceiver, *, seq: int, provider_seq: int,
                       upstream_requests: int) -> None:
        """Go on with a journaled stream whose producer is gone (a Responses background stream
        re-attached): ``receiver`` has read its journaled frames, up to proxy seq ``seq`` and
        ``sequence_number`` ``provider_seq``; the task starts with the upstream resume."""
        self._receiver = receiver
        self.seq = seq
        self._provider_seq = provider_seq
        self.upstream_requests = upstream_requests

    def _readers_changed(self, readers: int) -> None:
        limit = self._config.idle_cancel_after
        if limit is None:
            return
        if readers > 0:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
                self._idle_timer = None
        elif self._idle_timer is None:
            self._idle_timer = asyncio.get_running_loop().call_later(limit, self.stop)

    # -- the task -----------------------------------------------------------------------------

    async def run(self) -> None:
        error: StreamError | None = None
        try:
            if self._response is None:
                error = await self._resume_upstream()
            else:
                error = await self._pump(self._response)
            while self._resumable(error):
                error = await self._resume_upstream()
            await self._end(error)
        except asyncio.CancelledError:
            reason = self._stop_reason or "shutdown"
            await self._end(TransportError(f"proxy {reason}") if reason != "cancelled" else None,
                            cancelled=reason == "cancelled")
        except Exception as error:
            if self._commit_error is not None or isinstance(error, JOURNAL_ERRORS):
                # The journal failed (what a later commit says then, a refused seq, follows
                # from it): its readers get the notice, the sweep settles the stream later.
                first = self._commit_error or error
                log_event("stream.journal_failed", level=logging.WARNING,
                          stream_id=self.stream_id, seq=self.seq, error=type(first).__name__,
                          detail=str(first))
            else:
                log.exception("stream %s: producer failed", self.stream_id)
        finally:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            self._journal.release(self.stream_id)

    async def _pump(self, response: httpx2.Response) -> StreamError | None:
        """Read one upstream response to its end; the error that broke it, if any.

        httpx yields one HTTP chunk at a time, often one frame each. The first chunk of a turn of
        the event loop is parsed at once; the rest of that turn's burst is collected and
        ``_drain`` parses and submits it in one go, so a burst costs two parse calls and two
        journal appends, not one per frame.
        """
        receiver = self._receiver
        inbox = self._inbox
        try:
            try:
                # The upstream was asked for identity; one that compresses anyway is decoded.
                encoded = response.headers.get("content-encoding", "identity") != "identity"
                chunks = response.aiter_bytes() if encoded else response.aiter_raw()
                async for chunk in chunks:
                    if self._drain_scheduled:
                        inbox.append(chunk)  # more of this turn's burst: parsed at its end
                    else:
                        # The first chunk of a turn is parsed at once (no added latency); the
                        # call marks the burst and parses whatever else this turn brings.
                        self._drain_scheduled = True
                        asyncio.get_running_loop().call_soon(self._drain)
                        self._parse(chunk)
                    if receiver.finished:  # a malformed body: the message failed
                        break
                    if self._in_flight > _MAX_IN_FLIGHT or self._commit_error is not None:
                        await self._committed()
            finally:
                self._drain()
            if not receiver.finished:
                frames = receiver.receive_eof(time.monotonic())
                if frames:
                    self._submit(frames)
            await self._committed()
            return None
        except httpx2.TimeoutException as exc:
            seconds = self._config.read_timeout
            timeout = IdleTimeout(f"upstream sent nothing for {seconds:g} s", seconds=seconds)
            timeout.__cause__ = exc
            return timeout
        except httpx2.TransportError as exc:
            error = TransportError(f"upstream connection broke: {exc!r}")
            error.__cause__ = exc
            return error
        finally:
            await response.aclose()

    def _drain(self) -> None:
        """Parse what arrived since the last turn and submit its frames."""
        self._drain_scheduled = False
        inbox = self._inbox
        if not inbox:
            return
        data = inbox[0] if len(inbox) == 1 else b"".join(inbox)
        inbox.clear()
        self._parse(data)

    def _parse(self, data: bytes) -> None:
        receiver = self._receiver
        if receiver.finished:
            return
        frames = receiver.receive_data(data, time.monotonic())
        if frames:
            self._submit(frames)

    def _submit(self, frames: list[Frame]) -> None:
        """Number the frames and submit them to the journal's next group commit, without
        waiting for it: reading goes on, and readers are woken when the commit lands.

        The usage-only chunk of an OpenAI chat stream whose usage the proxy asked for (the
        client did not) is not a frame of the stream: the receiver has read its usage, which
        the journal keeps in the stream's state (submitted with these frames, or alone), but
        it gets no seq and is never sent. So the client's SDK sees the body it asked for, and
        the seqs a reader resumes by stay 1, 2, 3 ... with no gap where it was.
        """
        records: list[FrameRecord] = []
        dedupe = self._receiver.seq_source == "provider"
        sse = self._sse
        terminated = bool(self._spec.framing.terminator)
        epoch = self._epoch
        hidden = False
        observation = self.observation
        outputs, first_t, last_t = 0, 0.0, 0.0  # output frames, for telemetry
        for frame in frames:
            if self._request.usage_asked and _usage_only(frame):
                hidden = True
                continue
            if not self._first_chunk_seen and frame.has_output:
                self._first_chunk_seen = True
                assert self._metrics is not None
                self._metrics.first_chunk(self.dialect, frame.t - self._requested)
            if dedupe:
                if frame.seq <= self._provider_seq:
                    continue  # a frame the upstream sent again: already forwarded
                self._provider_seq = frame.seq
            self.seq += 1
            text = ""
            if frame.committed:
                for event in frame.events:
                    if event.__class__ is TextDelta:
                        text += event.text
                if observation is not None and (text or frame.has_output):
                    if not outputs:
                        first_t = frame.t
                    outputs += 1
                    last_t = frame.t
            wire = frame.sse
            if sse:
                event_type: str | None = wire.event  # type: ignore[union-attr]
                data = wire.data.encode()  # type: ignore[union-attr]
                records.append(
                    FrameRecord(self.seq, None if event_type == "message" else event_type,
                                data, text, frame.t + epoch)
                )
            else:
                # a line loses its line end (written again on the way out); a binary message
                # is kept whole
                raw = wire.raw.rstrip(b"\r\n") if terminated else wire.raw
                records.append(FrameRecord(self.seq, None, raw, text, frame.t + epoch))
        if outputs:
            assert observation is not None
            observation.output(first_t)
            if outputs > 1:
                observation.output(last_t, outputs - 1)
        if not records:
            if hidden:  # the usage alone: journaled now, not only with the next frame
                self._track(self._journal.submit(self.stream_id, [], self._state(final=False)))
            return
        self._track(self._journal.submit(self.stream_id, records, self._state(final=False)))
        self._in_flight += len(records)

    def _track(self, landed: asyncio.Future[Any]) -> None:
        if landed is not self._last_commit:  # appends of one turn share their group commit
            landed.add_done_callback(self._on_commit)
            self._last_commit = landed

    def _on_commit(self, landed: asyncio.Future[Any]) -> None:
        if landed.cancelled():
            return
        error = landed.exception()
        if error is not None and self._commit_error is None:
            self._commit_error = error

    async def _committed(self) -> None:
        """Wait until everything submitted so far is durable; raise if a commit failed."""
        last = self._last_commit
        if last is not None:
            await asyncio.shield(last)
        self._in_flight = 0
        if self._commit_error is not None:
            raise self._commit_error

    # -- upstream resume (Responses background) -----------------------------------------------

    def _resumable(self, error: StreamError | None) -> bool:
        receiver = self._receiver
        if not receiver.finished:
            receiver.close(error)
        message = receiver.message
        return (
            self._request.background
            and message.status is Status.INTERRUPTED
            and message.id is not None
            and self.upstream_requests <= self._config.upstream_resumes
        )

    async def _resume_upstream(self) -> StreamError | None:
        attempt = self.upstream_requests - 1
        if attempt:
            await asyncio.sleep(min(_RESUME_BACKOFF_S * 2 ** (attempt - 1), _RESUME_BACKOFF_MAX_S))
        self._receiver = self._receiver.reconnect()
        self.upstream_requests += 1
        if self.observation is not None:
            self.observation.event("unbroken.resume", side="upstream",
                                   after_seq=self.seq, starting_after=self._provider_seq)
        message_id = self._receiver.message.id
        url = (
            f"{self._request.origin}/v1/responses/{message_id}"
            f"?stream=true&starting_after={self._provider_seq}"
        )
        headers = [
            (name, value)
            for name, value in self._request.headers
            if name.lower() not in ("content-type", "accept")
        ]
        headers.append(("accept", "text/event-stream"))
        sent = time.perf_counter()
        try:
            response = await self._client.send(
                self._client.build_request("GET", url, headers=headers), stream=True
            )
        except httpx2.TransportError as exc:
            return TransportError(f"upstream resume failed: {exc!r}")
        log_event("upstream.resume", stream_id=self.stream_id, seq=self.seq,
                  starting_after=self._provider_seq, upstream_status=response.status_code,
                  upstream_ms=round((time.perf_counter() - sent) * 1000, 3))
        if response.status_code != 200:
            await response.aclose()
            return TransportError(f"upstream resume answered HTTP {response.status_code}")
        return await self._pump(response)

    # -- the end ------------------------------------------------------------------------------

    async def _end(self, error: StreamError | None, *, cancelled: bool = False) -> None:
        if self._ending:  # a cancel arrived while the end was being written
            return
        self._ending = True
        receiver = self._receiver
        if not receiver.finished:
            receiver.close(error, cancelled=cancelled)
        message = receiver.message
        status = message.status
        closing = closing_error(message, self._stop_reason)
        last = [] if closing is None else [self._error_frame(closing)]
        await self._journal.append(self.stream_id, last, self._state(final=True))
        if self._metrics is not None:
            self._metrics.stream_ended(self.dialect, status, time.monotonic() - self._requested)
        if self.observation is not None:
            self.observation.end(message, frames=self.seq, stream_id=self.stream_id)
        log_event("stream.end", stream_id=self.stream_id, seq=self.seq, status=status.value,
                  upstream_requests=self.upstream_requests,
                  seconds=round(time.monotonic() - self._started, 3))

    def _error_frame(self, mark: ProxyMark) -> FrameRecord:
        self.seq += 1
        provider_seq = self._provider_seq + 1 if self._spec.numbered else None
        return error_frame(self.dialect, self.seq, mark, provider_seq)

    def _state(self, *, final: bool) -> StreamState:
        """The stream's state for the journal. While live, the previous one is reused until
        something in it other than progress changes, or a second passed: the journal reads a
        live stream's last seq from its frames."""
        message = self._receiver.message
        now = time.time()
        key = (message.finish, message.usage, message.error, message.id, self.upstream_requests)
        if not final:
            last = self._progress
            if last is not None and now - last.updated < _PROGRESS_EVERY and key == self._key:
                return last
            self._key = key
        # The message's view, not its Finish alone: an error event in the stream is finish
        # reason ``error`` with the provider's error type as the raw one.
        reason = message.finish_reason
        state = StreamState(
            status=message.status if final else Status.STREAMING,
            updated=now,
            last_seq=self.seq,
            finish_reason=None if reason is None else reason.value,
            raw_finish_reason=message.raw_finish_reason,
            usage=usage_fields(message.usage),
            error=error_fields(message.error),
            upstream_requests=self.upstream_requests,
            provider_id=message.id,
        )
        if not final:
            self._progress = state
        return state


def _usage_only(frame: Frame) -> bool:
    """Whether a frame is OpenAI chat's usage-only chunk: only usage parsed from it, and its
    payload says ``"choices": []`` (only such frames have their JSON read twice)."""
    events = frame.events
    if not events or any(event.__class__ is not Usage for event in events):
        return False
    return is_usage_only_chunk(frame.sse.data.encode())  # type: ignore[union-attr]
