"""``LiveTail``: the in-process side of a stream that is still being produced.

It holds the most recent frames (a bounded cache, so a reader that keeps up never touches the
storage and a slow one never grows memory: it falls back to the journal), wakes readers when a
commit lands, and counts attached readers so the proxy can cancel a generation nobody reads.

The cache is small on purpose: a live stream holds it for as long as it runs, and with
hundreds of streams open a cache of 256 frames (~90 KiB of records each, once a stream ran that
long) was most of the proxy's memory per stream; 32 frames still ~10 KiB (a stream at 50
frames/s fills them in 0.6 s). So a frame leaves it once every attached reader has read it
(each tells its cursor: ``attach``/``advance``): with readers that keep up, the cache holds the
last commit's frames, unread yet. The bounds (frames, bytes) are for readers that lag and for a
stream nobody reads yet; a reader further behind than the cache reads the storage, as a resume
does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .records import FrameRecord

__all__ = ["TAIL_BYTES", "TAIL_FRAMES", "LiveTail"]

TAIL_FRAMES = 32
"""Frames a live tail keeps at most by default, beyond the last commit's (at 50 frames/s, the
last 0.6 s of a stream), for readers that lag."""

TAIL_BYTES = 16 * 2**10
"""Bytes of frame data a live tail keeps at most (the newest frame is kept whatever its size)."""


class LiveTail:
    """Recent frames of one live stream and the notification that new ones were committed."""

    __slots__ = (
        "_bytes", "_cursors", "_frames", "_max_bytes", "_max_frames", "_pulse", "_pulse_due",
        "_waiters", "ended", "last_seq", "on_readers", "stream_id",
    )

    def __init__(self, stream_id: str, *, max_frames: int = TAIL_FRAMES,
                 max_bytes: int = TAIL_BYTES) -> None:
        self.stream_id = stream_id
        # A list and futures made only while a reader waits, not a deque and an asyncio.Event:
        # each of those carries a ~620-byte block, for every live stream (issue 17's memory).
        self._frames: list[FrameRecord] = []
        self._max_frames = max(1, max_frames)
        self._max_bytes = max_bytes
        self._bytes = 0  # of the cached frames' data
        self._waiters: list[asyncio.Future[None]] | None = None
        self._pulse: asyncio.TimerHandle | None = None
        self._pulse_due = 0.0  # loop time the pulse is armed for (uvloop's handle has no when())
        self.last_seq = 0
        self.ended = False
        self._cursors: list[list[int]] = []  # each attached reader's: the last seq it read
        # Called with the new reader count whenever a reader attaches or detaches.
        self.on_readers: Callable[[int], None] | None = None

    def publish(self, frames: Sequence[FrameRecord], *, ended: bool) -> None:
        """Frames just committed (seqs continuing ``last_seq``); wake every waiting reader."""
        if frames:
            cached = self._frames
            size = self._bytes
            for frame in frames:
                cached.append(frame)
                size += len(frame.data)
            # Drop the oldest that every attached reader has read, and any beyond either bound:
            # the count never drops this commit's frames, the bytes keep the newest frame.
            cursors = self._cursors
            read = (cursors[0][0] if len(cursors) == 1 else min(c[0] for c in cursors)
                    ) if cursors else 0
            kept, drop, most = len(cached), 0, max(self._max_frames, len(frames))
            while kept - drop > 1 and (kept - drop > most or size > self._max_bytes
                                       or cached[drop].seq <= read):
                size -= len(cached[drop].data)
                drop += 1
            if drop:
                del cached[:drop]
            self._bytes = size
            self.last_seq = frames[-1].seq
        if ended:
            self.ended = True
        self._wake()

    def _wake(self) -> None:
        """Resolve every current waiter; the next ``wait`` waits for the next commit."""
        waiters = self._waiters
        if waiters is not None:
            self._waiters = None
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def after(self, seq: int) -> list[FrameRecord] | None:
        """Cached frames with seq > ``seq``; ``None`` if some of them are older than the cache."""
        if seq >= self.last_seq:
            return []
        frames = self._frames
        if not frames or frames[0].seq > seq + 1:
            return None
        return frames[max(0, seq + 1 - frames[0].seq):]

    async def wait(self, pulse: float | None = None) -> None:
        """Wait for the next commit, or at most about ``pulse`` seconds.

        The pulse is one timer per tail, shared by its readers and armed only while one waits,
        at the earliest moment a waiting reader asked for, so a stream that flows costs no
        timer per frame; a woken reader decides by its own clock whether it has been quiet
        long enough to send a keep-alive, and asks again for what is left of its silence.
        """
        loop = asyncio.get_running_loop()
        if pulse is not None:
            due = loop.time() + pulse
            armed = self._pulse
            if armed is None or self._pulse_due > due:
                if armed is not None:
                    armed.cancel()
                self._pulse = loop.call_at(due, self._on_pulse)
                self._pulse_due = due
        waiter = loop.create_future()
        if self._waiters is None:
            self._waiters = [waiter]
        else:
            self._waiters.append(waiter)
        try:
            await waiter
        finally:
            waiters = self._waiters
            if waiter.cancelled() and waiters is not None and waiter in waiters:
                waiters.remove(waiter)  # a reader that left is not kept until the next wake

    def _on_pulse(self) -> None:
        self._pulse = None
        self._wake()

    def close(self) -> None:
        """The stream ended: wake every reader one last time and drop the timer."""
        if self._pulse is not None:
            self._pulse.cancel()
            self._pulse = None
        self.publish((), ended=True)

    @property
    def readers(self) -> int:
        """Readers attached now."""
        return len(self._cursors)

    def attach(self, after: int = 0) -> list[int]:
        """A reader begins after seq ``after``; the token it passes to ``advance`` (each time
        it has read on) and to ``detach``."""
        token = [after]
        self._cursors.append(token)
        if self.on_readers is not None:
            self.on_readers(self.readers)
        return token

    @staticmethod
    def advance(token: list[int], seq: int) -> None:
        """The reader of ``token`` has read up to ``seq``: the cache may let those go."""
        token[0] = seq

    def detach(self, token: list[int]) -> None:
        self._cursors = [other for other in self._cursors if other is not token]
        if self.on_readers is not None:
            self.on_readers(self.readers)
