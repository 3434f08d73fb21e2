"""``SourceProducer``: the task that reads an app's source, once, into the journal.

It belongs to ``ResumableStreams``, never to a request: a client that leaves changes nothing;
``stop("cancelled")`` ends the stream ``cancelled``, ``stop("shutdown")`` ``interrupted``.
Each value the source yields is one frame (``frames.py``), submitted to the journal's next
group commit without waiting for it; the last frame is always the ``end`` frame, appended with
the final state:

==========================================  ===============================================
the source                                  the end
==========================================  ===============================================
returns                                     ``completed`` / ``stop``, or what a ``Finish``
                                            event it yielded says
is a tracked provider stream                its message's status, finish reason, raw reason
                                            and error
raises                                      ``failed``, the error's type and message (its
                                            traceback goes to the log, never to readers)
yields nothing for ``idle_timeout``, or     ``interrupted`` (``IdleTimeout`` /
runs past ``total_timeout``                 ``TotalTimeout``)
is cancelled / the server shuts down        ``cancelled`` / ``interrupted``
==========================================  ===============================================
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

from ..client.aio import AsyncStream
from ..errors import FrameLimitError
from ..events import Finish
from ..finish import END_STATES, Status
from ..message import Message
from ..sdk.tracked import AsyncTrackedStream
from ..streams.app_stream import end_frame
from ..streams.journal import FrameRecord, Journal, StreamState
from ..streams.logs import log_event
from ..streams.stream_outcome import error_fields
from ..telemetry import Observation
from .frames import encode_value

__all__ = ["Outcome", "SourceLimits", "SourceProducer"]

log = logging.getLogger("unbroken.server")

_MAX_IN_FLIGHT: Final = 4096  # frames submitted but not yet committed before reading waits
_CLOSE_TIMEOUT_S: Final = 5.0  # how long a source's own cleanup may take once it is stopped


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceLimits:
    """What one source may do: frames, bytes per frame, seconds between values, in all."""

    max_frames: int
    max_frame_bytes: int
    idle_timeout: float | None
    total_timeout: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """How a stream ended, as its end frame and final state say it."""

    status: Status
    finish_reason: str | None = None
    raw_finish_reason: str | None = None
    error: dict[str, Any] | None = None


class _DeadlinePassed(Exception):
    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class SourceProducer:
    """Reads one source into the journal until it ends, fails, times out or is stopped."""

    def __init__(self, *, journal: Journal, stream_id: str, source: object,
                 limits: SourceLimits) -> None:
        self.stream_id = stream_id
        self._journal = journal
        self._source = source
        self._limits = limits
        self.seq = 0
        self.runs = 0  # how often a source was started here (1 at most: tests count it)
        self.task: asyncio.Task[None] | None = None
        self._stop_reason: str | None = None
        self._ending = False
        self._message: Message | None = None
        self._finish: Finish | None = None
        self._last_commit: asyncio.Future[None] | None = None
        self._commit_error: BaseException | None = None
        self._in_flight = 0
        self._deadline_kind = "idle"  # which deadline is armed: "idle" or "total"
        # The tracked source's telemetry (None when off, or for an app's own values: a
        # GenAI span needs a provider stream); readers' resumes are events on its span.
        self.observation: Observation | None = None

    # -- control ------------------------------------------------------------------------------

    def start(self) -> asyncio.Task[None]:
        self.task = asyncio.get_running_loop().create_task(
            self.run(), name=f"unbroken-source-{self.stream_id}")
        return self.task

    def stop(self, reason: str = "cancelled") -> None:
        """``"cancelled"`` ends the stream ``cancelled``; ``"shutdown"`` ``interrupted``. Once
        the end is being written it goes ahead unchanged."""
        if self.task is not None and not self.task.done() and not self._ending:
            self._stop_reason = self._stop_reason or reason
            self.task.cancel()

    # -- the task -----------------------------------------------------------------------------

    async def run(self) -> None:
        self.runs += 1
        started = time.monotonic()
        try:
            outcome = await self._read_outcome()
            self._ending = True
            await self._committed()
            state = StreamState(status=outcome.status, updated=time.time(),
                                last_seq=self.seq + 1, finish_reason=outcome.finish_reason,
                                raw_finish_reason=outcome.raw_finish_reason,
                                error=outcome.error)
            last = end_frame(self.seq + 1, outcome.status, finish_reason=outcome.finish_reason,
                             raw_finish_reason=outcome.raw_finish_reason, error=outcome.error)
            await self._journal.append(self.stream_id, [last], state)
            self.seq += 1
            log_event("stream.end", stream_id=self.stream_id, seq=self.seq,
                      status=outcome.status.value,
                      seconds=round(time.monotonic() - started, 3))
        except Exception:
            # The journal failed: readers get what is stored, then no end (never a false one).
            log.exception("stream %s: its end could not be journaled", self.stream_id)
        finally:
            self._journal.release(self.stream_id)

    async def _read_outcome(self) -> Outcome:
        try:
            await self._read_source()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            if (self._stop_reason or "shutdown") == "cancelled":
                return Outcome(status=Status.CANCELLED)
            return Outcome(status=Status.INTERRUPTED, error={
                "type": "shutdown",
                "message": "the server shut down before the stream ended"})
        except _DeadlinePassed as passed:
            return self._timed_out(passed.kind)
        except Exception as exc:
            tracked = self._tracked_outcome()
            if tracked is not None and tracked.status is not Status.COMPLETED:
                return tracked  # a provider stream that raised at its end says why itself
            return self._failed(exc)
        tracked = self._tracked_outcome()
        if tracked is not None:
            return tracked
        finish = self._finish
        if finish is not None:
            return Outcome(status=finish.status, finish_reason=finish.reason.value,
                           raw_finish_reason=finish.raw)
        return Outcome(status=Status.COMPLETED, finish_reason="stop")

    def _failed(self, exc: BaseException) -> Outcome:
        log.warning("stream %s: its source raised %s", self.stream_id, type(exc).__name__,
                    exc_info=exc)
        return Outcome(status=Status.FAILED, finish_reason="error",
                       error={"type": type(exc).__name__, "message": str(exc)})

    def _timed_out(self, kind: str) -> Outcome:
        limits = self._limits
        if kind == "total":
            return Outcome(status=Status.INTERRUPTED, error={
                "type": "TotalTimeout",
                "message": f"the source ran longer than total_timeout "
                           f"({limits.total_timeout:g} s)"})
        return Outcome(status=Status.INTERRUPTED, error={
            "type": "IdleTimeout",
            "message": f"the source yielded nothing for idle_timeout ({limits.idle_timeout:g} s)"})

    def _tracked_outcome(self) -> Outcome | None:
        message = self._message
        if message is None or message.status not in END_STATES:
            return None
        reason = message.finish_reason
        return Outcome(status=message.status,
                       finish_reason=None if reason is None else reason.value,
                       raw_finish_reason=message.raw_finish_reason,
                       error=error_fields(message.error))

    async def _read_source(self) -> None:
        source: Any = self._source
        if not hasattr(source, "__aiter__") and hasattr(source, "__aenter__"):
            # ``unbroken.astream(...)`` and the like: entered here, so the stream lives as long
            # as its producer, not as the request that started it.
            async with source as entered:
                await self._read(entered)
        else:
            await self._read(source)

    async def _read(self, source: Any) -> None:
        message = getattr(source, "message", None)
        if isinstance(source, AsyncStream | AsyncTrackedStream) and isinstance(message, Message):
            self._message = message
            self.observation = source.observation
            if self.observation is not None:
                self.observation.stream_id = self.stream_id
        # An SDK's stream yields the SDK's objects; what readers want of them is the text.
        values: Any = source.iter_text() if isinstance(source, AsyncTrackedStream) else source
        if not hasattr(values, "__aiter__"):
            raise TypeError(f"unbroken.server: a source must be an async iterable, not "
                            f"{type(values).__qualname__}")
        iterator: AsyncIterator[object] = aiter(values)
        limits = self._limits
        loop = asyncio.get_running_loop()
        total_at = None if limits.total_timeout is None else loop.time() + limits.total_timeout
        deadline = asyncio.timeout(None)
        try:
            async with deadline:
                while True:
                    self._arm(deadline, loop.time(), total_at)
                    try:
                        value = await anext(iterator)
                    except StopAsyncIteration:
                        break
                    self._take(value)
                    if self._in_flight > _MAX_IN_FLIGHT or self._commit_error is not None:
                        deadline.reschedule(None)
                        await self._committed()
        except TimeoutError:
            if deadline.expired():  # ours, not one the source raised itself
                raise _DeadlinePassed(self._deadline_kind) from None
            raise
        finally:
            await self._close(iterator, source)

    def _arm(self, deadline: asyncio.Timeout, now: float, total_at: float | None) -> None:
        idle = self._limits.idle_timeout
        idle_at = None if idle is None else now + idle
        if idle_at is not None and (total_at is None or idle_at < total_at):
            self._deadline_kind = "idle"
            deadline.reschedule(idle_at)
        else:
            self._deadline_kind = "total"
            deadline.reschedule(total_at)

    def _take(self, value: object) -> None:
        limits = self._limits
        if self.seq >= limits.max_frames - 1:  # the end frame needs the last seq
            raise FrameLimitError(
                f"unbroken.server: the source yielded more than max_frames ({limits.max_frames}) "
                "frames", limit=limits.max_frames)
        frame = encode_value(value, self.seq + 1, time.time(), limits.max_frame_bytes)
        if value.__class__ is Finish:
            self._finish = value
        self.seq = frame.seq
        self._submit(frame)

    def _submit(self, frame: FrameRecord) -> None:
        state = StreamState(status=Status.STREAMING, updated=frame.at, last_seq=frame.seq)
        landed = self._journal.submit(self.stream_id, [frame], state)
        if landed is not self._last_commit:  # appends of one turn share their group commit
            landed.add_done_callback(self._on_commit)
            self._last_commit = landed
        self._in_flight += 1

    def _on_commit(self, landed: asyncio.Future[None]) -> None:
        if not landed.cancelled() and landed.exception() is not None and (
                self._commit_error is None):
            self._commit_error = landed.exception()

    async def _committed(self) -> None:
        """Wait until everything submitted is durable; raise if a commit failed."""
        last = self._last_commit
        if last is not None:
            await asyncio.shield(last)
        self._in_flight = 0
        if self._commit_error is not None:
            raise self._commit_error

    async def _close(self, iterator: AsyncIterator[object], source: Any) -> None:
        """Let the source clean up (an async generator's ``finally``, an SDK stream's
        connection), for a bounded time."""
        for closable in (iterator, source):
            aclose = getattr(closable, "aclose", None)
            if aclose is None:
                continue
            with contextlib.suppress(Exception, asyncio.CancelledError):
                async with asyncio.timeout(_CLOSE_TIMEOUT_S):
                    await aclose()
