"""Producer leases and crash recovery.

Every live stream has a lease in the journal: this process's owner id and an expiry, renewed by
``LeaseKeeper`` every ``renew_every`` seconds for all its streams in one statement. A process
that dies (SIGKILL, power loss) stops renewing; once the lease has expired the stream has no
producer, and ``Recovery`` marks it ``interrupted`` with the reason in its error, every journaled
frame kept. That happens when a proxy starts on the journal (at once for an expired lease, at
its expiry for one still running), and whenever a reader finds such a stream.

What a stream marked so gets last is its kind's business, given as ``RecoveredEnd``: the
proxy writes the dialect's error frame, so the official SDKs raise, except for a Responses
background stream with a known response id, which stays continuable (``proxy/producer_lost.py``);
an app stream of ``unbroken.server`` gets its ``end`` frame. A ``Recovery`` leaves alone the
streams whose kind its ``RecoveredEnd`` does not know (it returns ``None``).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..finish import Status
from .journal import FrameRecord, Journal, Lease, StreamRecord
from .logs import log_event

__all__ = ["REATTACHABLE", "LeaseKeeper", "RecoveredEnd", "Recovery", "running_elsewhere"]

REATTACHABLE = "proxy_restarted"  # the error type of a stream whose producer is gone
log = logging.getLogger("unbroken.proxy")

RecoveredEnd = Callable[[StreamRecord], "tuple[dict[str, Any], FrameRecord | None] | None"]
"""For a stream whose producer is gone: the error its state keeps and the frame that ends it
(``None``: it stays continuable, no frame), or ``None`` for a stream of a kind this recovery
does not settle."""


class LeaseKeeper:
    """This process's leases: one owner id, renewed for all its live streams at once."""

    def __init__(self, journal: Journal, *, ttl: float, renew_every: float,
                 kind: str = "proxy") -> None:
        self.journal = journal
        self.ttl = ttl
        self.renew_every = renew_every
        self.owner = f"{kind}_" + secrets.token_hex(8)

    def lease(self) -> Lease:
        return Lease(self.owner, time.time() + self.ttl)

    async def run(self) -> None:
        """Renew forever (a task of the lifespan)."""
        while True:
            await asyncio.sleep(self.renew_every)
            try:
                await self.journal.renew_leases(self.owner, time.time() + self.ttl)
            except Exception:
                log.exception("lease renewal failed")


class Recovery:
    """Marks streams whose producer is gone ``interrupted``, exactly once each."""

    def __init__(self, journal: Journal, keeper: LeaseKeeper, end: RecoveredEnd) -> None:
        self.journal = journal
        self.keeper = keeper
        self.end = end
        self._lock = asyncio.Lock()
        self._timers: set[asyncio.TimerHandle] = set()
        self._settling: set[asyncio.Task[None]] = set()  # held: the loop keeps weak refs

    async def startup(self) -> int:
        """Settle every unfinished stream of the journal: now if its lease expired, else at its
        expiry. How many were marked now."""
        marked = 0
        loop = asyncio.get_running_loop()
        for stream_id in await self.journal.unfinished():
            lease = await self.journal.lease(stream_id)
            wait = 0.0 if lease is None else lease.expires - time.time()
            if wait <= 0:
                marked += await self.settle(stream_id) is not None
            elif not self.journal.follows_other_processes:
                # A shared journal needs no timer per stream: its live streams belong to
                # running replicas, and the proxy's periodic sweep settles a dead one's.
                timer = loop.call_later(wait + 0.01, self._settle_later, stream_id)
                self._timers.add(timer)
        return marked

    async def sweep(self) -> int:
        """Settle every unfinished stream whose lease has run out (a journal shared by
        replicas: one of them died); how many were marked."""
        marked = 0
        for stream_id in await self.journal.unfinished():
            lease = await self.journal.lease(stream_id)
            if self.journal.tail(stream_id) is None and not running_elsewhere(
                lease, self.keeper.owner
            ):
                # Listed as unfinished a moment ago: ended now means this sweep settled it.
                settled = await self.settle(stream_id)
                marked += settled is not None and settled.state.ended
        return marked

    def _settle_later(self, stream_id: str) -> None:
        task = asyncio.get_running_loop().create_task(self._settle_logged(stream_id))
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def _settle_logged(self, stream_id: str) -> None:
        try:
            await self.settle(stream_id)
        except Exception:
            log.exception("stream %s: recovery failed", stream_id)

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        for task in self._settling:
            task.cancel()

    async def settle(self, stream_id: str, *, wait: bool = False) -> StreamRecord | None:
        """If the stream is unfinished, not produced here and its lease expired, mark it
        ``interrupted``; the record as it is now, or ``None`` if unknown.

        ``wait``: a lease that has not expired yet is waited for (once, until its expiry), so
        that a reader arriving just after a crash gets the stream's true end, not a silent
        stop after the stored frames. A lease renewed meanwhile has a live producer elsewhere.
        """
        async with self._lock:
            record = await self.journal.get(stream_id, with_text=False)
            if record is None or record.state.ended or self.journal.tail(stream_id) is not None:
                return record
            lease = await self.journal.lease(stream_id)
        if wait and lease is not None and running_elsewhere(lease, self.keeper.owner):
            await asyncio.sleep(lease.expires - time.time() + 0.01)
        async with self._lock:
            record = await self.journal.get(stream_id, with_text=False)
            if record is None or record.state.ended or self.journal.tail(stream_id) is not None:
                return record
            lease = await self.journal.lease(stream_id)
            if running_elsewhere(lease, self.keeper.owner):
                return record  # its producer may still be alive in another process
            return await self._interrupt(record, lease)

    async def _interrupt(self, record: StreamRecord, lease: Lease | None) -> StreamRecord:
        state = record.state
        end = self.end(record)
        if end is None:
            return record  # another kind's stream: its own recovery settles it
        error, frame = end
        interrupted = replace(state, status=Status.INTERRUPTED, updated=time.time(), error=error)
        continuable = frame is None
        frames: list[FrameRecord] = []
        if frame is not None:
            interrupted = replace(interrupted, last_seq=frame.seq)
            frames.append(frame)
        try:
            await self.journal.append(record.meta.stream_id, frames, interrupted)
        except ValueError:
            # A journal shared by replicas: another one settled the stream first (its error
            # frame took the seq); theirs is the end.
            settled = await self.journal.get(record.meta.stream_id, with_text=False)
            return settled or record
        log_event("stream.recovered", level=logging.WARNING, stream_id=record.meta.stream_id,
                  seq=interrupted.last_seq, status="interrupted", continuable=continuable,
                  lease_owner=None if lease is None else lease.owner)
        return replace(record, state=interrupted)


def running_elsewhere(lease: Lease | None, owner: str) -> bool:
    """A lease not expired, of another process (this one knows its own producers: a stream
    it leases without a live tail here lost its producer, e.g. to a failed commit)."""
    return lease is not None and lease.owner != owner and lease.expires > time.time()
