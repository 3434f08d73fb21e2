"""Producer leases and crash recovery.

Every live stream has a lease in the journal: this process's owner id and an expiry, renewed by
``LeaseKeeper`` every ``renew_every`` seconds for all its streams in one statement. A process
that dies (SIGKILL, power loss) stops renewing; once the lease has expired, or at once when its
holder is known dead (a process of this host that is gone: ``journal/holder.py``), the stream
has no producer, and ``Recovery`` marks it ``interrupted`` with the reason in its error, every
journaled frame kept. That happens when a proxy starts on the journal (at once for an expired
lease or a dead holder, at its expiry for one still running), in a periodic sweep, and whenever
a reader finds such a stream. A stream whose finish frame was journaled ends as that finish
says (``completed``, ``truncated``, ...), with no frame added: the provider's word decides, and
what was lost after it carries no content.

What a stream marked so gets last is its kind's business, given as ``RecoveredEnd``: the
proxy writes the dialect's error frame, so the official SDKs raise, except for a Responses
background stream with a known response id, which stays continuable (``proxy/producer_lost.py``);
an app stream of ``unbroken.server`` gets its ``end`` frame. A ``Recovery`` leaves alone the
streams whose kind its ``RecoveredEnd`` does not know (it returns ``None``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from ..finish import STATUS_OF_REASON, FinishReason, Status
from .journal import FrameRecord, Journal, Lease, StreamRecord, StreamState
from .journal.holder import known_dead, new_owner
from .logs import log_event

__all__ = ["REATTACHABLE", "LeaseKeeper", "RecoveredEnd", "Recovery", "running_elsewhere"]

REATTACHABLE = "proxy_restarted"  # the error type of a stream whose producer is gone
_HOLDER_CHECK_S = 0.5  # how often a reader waiting on a lease looks whether its holder died

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
        self.owner = new_owner(kind)  # names this process and its host (holder.py)

    def lease(self) -> Lease:
        return Lease(self.owner, time.time() + self.ttl)

    async def run(self) -> None:
        """Renew forever (a task of the lifespan)."""
        while True:
            await asyncio.sleep(self.renew_every)
            try:
                await self.journal.renew_leases(self.owner, time.time() + self.ttl)
            except Exception as error:  # the journal is away: one line, the next round tries
                log_event("lease.renew_failed", level=logging.WARNING,
                          error=type(error).__name__, detail=str(error))


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
        """Settle every unfinished stream of the journal: now if its lease expired or its
        holder is known dead, else at its expiry. How many were marked now."""
        marked = 0
        loop = asyncio.get_running_loop()
        for stream_id in await self.journal.unfinished():
            lease = await self.journal.lease(stream_id)
            if not running_elsewhere(lease, self.keeper.owner):
                marked += await self.settle(stream_id) is not None
            elif lease is not None and not self.journal.follows_other_processes:
                # A shared journal needs no timer per stream: its live streams belong to
                # running replicas, and the proxy's periodic sweep settles a dead one's.
                timer = loop.call_later(lease.expires - time.time() + 0.01,
                                        self._settle_later, stream_id)
                self._timers.add(timer)
        return marked

    async def sweep(self) -> int:
        """Settle every unfinished stream with no producer: its lease ran out (a journal
        shared by replicas: one of them died), its holder is known dead (a sibling worker on
        one SQLite file), or it is this process's own and its producer is gone (a failed
        commit, a create whose journal write failed); how many were marked."""
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
        except Exception as error:  # the journal is away: the sweep or a reader tries again
            log_event("stream.recovery_failed", level=logging.WARNING, stream_id=stream_id,
                      error=type(error).__name__, detail=str(error))

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
        while wait and lease is not None and running_elsewhere(lease, self.keeper.owner):
            # Until the lease expires, looking now and then whether its holder died (a
            # process of this host: known at once), or the stream ended.
            await asyncio.sleep(max(0.01, min(_HOLDER_CHECK_S, lease.expires - time.time())))
            if lease.expires <= time.time():
                break
            if known_dead(lease.owner) or (await self.journal.get(
                    stream_id, with_text=False) or record).state.ended:
                break
        async with self._lock:
            record = await self.journal.get(stream_id, with_text=False)
            if record is None or record.state.ended or self.journal.tail(stream_id) is not None:
                return record
            lease = await self.journal.lease(stream_id)
            if running_elsewhere(lease, self.keeper.owner):
                return record  # its producer may still be alive in another process
            return await self._interrupt(record, lease)

    async def waiter(self, record: StreamRecord) -> Callable[[], Awaitable[object]] | None:
        """For a stream not ended, not produced here, whose lease another process holds that
        may be alive (a journal that cannot follow it): the wait for its fate (lease expiry,
        or its holder found dead), which a response makes after its head, with keep-alives,
        instead of a silent socket. ``None`` when there is nothing to wait for."""
        stream_id = record.meta.stream_id
        if (record.state.ended or self.journal.follows_other_processes
                or self.journal.tail(stream_id) is not None):
            return None
        if not running_elsewhere(await self.journal.lease(stream_id), self.keeper.owner):
            return None

        async def settle() -> object:
            return await self.settle(stream_id, wait=True)

        return settle

    async def _interrupt(self, record: StreamRecord, lease: Lease | None) -> StreamRecord:
        state = record.state
        end = self.end(record)
        if end is None:
            return record  # another kind's stream: its own recovery settles it
        if state.finish_reason is not None:
            # Its finish frame was journaled: the provider decided the end (README).
            reason = FinishReason(state.finish_reason)
            finished = replace(state, status=STATUS_OF_REASON[reason], updated=time.time())
            return await self._end(record, finished, [], lease, continuable=False)
        error, frame = end
        interrupted = replace(state, status=Status.INTERRUPTED, updated=time.time(), error=error)
        frames: list[FrameRecord] = []
        if frame is not None:
            interrupted = replace(interrupted, last_seq=frame.seq)
            frames.append(frame)
        return await self._end(record, interrupted, frames, lease, continuable=frame is None)

    async def _end(self, record: StreamRecord, ended: StreamState, frames: list[FrameRecord],
                   lease: Lease | None, *, continuable: bool) -> StreamRecord:
        try:
            await self.journal.append(record.meta.stream_id, frames, ended)
        except ValueError:
            # A journal shared by replicas: another one settled the stream first (its error
            # frame took the seq); theirs is the end.
            settled = await self.journal.get(record.meta.stream_id, with_text=False)
            return settled or record
        log_event("stream.recovered", level=logging.WARNING, stream_id=record.meta.stream_id,
                  seq=ended.last_seq, status=ended.status.value, continuable=continuable,
                  was=record.state.status.value,
                  lease_owner=None if lease is None else lease.owner)
        return replace(record, state=ended)


def running_elsewhere(lease: Lease | None, owner: str) -> bool:
    """A lease not expired, of another process not known to be dead (this one knows its own
    producers: a stream it leases without a live tail here lost its producer, e.g. to a
    failed commit)."""
    return (lease is not None and lease.owner != owner and lease.expires > time.time()
            and not known_dead(lease.owner))
