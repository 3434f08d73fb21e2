"""``SharedFollow``: how a journal shared by several processes follows a stream one of the
others produces. One loop, two backends.

A stream produced in this process is followed through its in-process ``LiveTail`` (``Journal.
follow``). Another process's stream is followed here: read the frames after the cursor from
storage; when there are none, wait on the backend's ``Watch`` until it says something landed,
then read again. The backend is what wakes the reader, never sleep-polling: Redis itself
(``XREAD BLOCK``, ``redis_follow.py``), or for SQLite the producing process, which tells the
processes that watch its streams after each commit (``sqlite_notices.py``).

A reader idle for ``orphan_check`` seconds (``ORPHAN_CHECK`` by default), or whose watch lost
the producer, reads storage again (so a notification that never came costs that long, never a
hang) and looks at the stream's producer lease: a stream whose lease ran out or whose holder is
known dead goes to ``on_orphan`` (the proxy's recovery, which writes the end the reader then
gets).
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import abstractmethod
from collections.abc import AsyncGenerator, Awaitable
from typing import Final, Protocol

from .base import FOLLOW_BATCH, FrameRecord, Journal
from .holder import known_dead

__all__ = ["ORPHAN_CHECK", "SharedFollow", "Watch"]

ORPHAN_CHECK: Final = 5.0  # seconds a waiting reader waits before it reads and looks again
log = logging.getLogger("unbroken.proxy")


class Watch(Protocol):
    """A backend's watch on one stream another process produces, for one reader."""

    ended: bool
    """Whether the stream is known to have ended (set before the wait that tells it returns)."""

    async def wait(self, cursor: int, timeout: float) -> list[FrameRecord] | None:
        """Wait at most ``timeout`` seconds for something to land. ``None``: nothing did (or the
        watch lost the producer: look at its lease); else the frames after ``cursor`` it
        brought, possibly none (then storage is read again)."""
        ...

    async def aclose(self) -> None:
        """Stop watching (the reader left)."""
        ...


class SharedFollow(Journal):
    """``follow`` for a journal several processes share: in-process streams by their live
    tail, the others through the backend's ``Watch``."""

    follows_other_processes = True
    orphan_check: float = ORPHAN_CHECK  # the longest one wait lasts

    @abstractmethod
    async def _watch(self, stream_id: str) -> Watch | None:
        """Begin watching a stream (before its frames are read, so nothing that lands after
        the read is missed); ``None`` if the stream is unknown."""

    def follow(
        self, stream_id: str, after: int, *, keepalive: float | None = None
    ) -> AsyncGenerator[list[FrameRecord], None]:
        """As ``Journal.follow``; a stream produced in another process is followed through
        the backend's watch. The generator chosen is returned itself, not wrapped: no second
        generator per reader and per batch."""
        if self._tails.get(stream_id) is not None:
            return super().follow(stream_id, after, keepalive=keepalive)
        return self._follow_shared(stream_id, after, keepalive)

    async def _follow_shared(
        self, stream_id: str, after: int, keepalive: float | None
    ) -> AsyncGenerator[list[FrameRecord], None]:
        watch = await self._watch(stream_id)
        if watch is None:
            return
        cursor = after
        clock = asyncio.get_running_loop().time
        quiet_since = clock()
        try:
            while True:
                # Read `ended` first: an end lands with or after its last frames, so once it is
                # known, the read below gets everything.
                ended = watch.ended
                frames = await self.read_after(stream_id, cursor, FOLLOW_BATCH)
                if frames:
                    yield frames
                    cursor = frames[-1].seq
                    quiet_since = clock()
                    continue
                if ended:
                    return
                wait = self.orphan_check if keepalive is None else max(
                    0.001, min(self.orphan_check, keepalive - (clock() - quiet_since)))
                brought = await watch.wait(cursor, wait)
                if brought is None:
                    if keepalive is not None and clock() - quiet_since >= keepalive:
                        yield []
                        quiet_since = clock()
                    watch.ended = await self._check_producer(stream_id)
                elif brought:
                    yield brought
                    cursor = brought[-1].seq
                    quiet_since = clock()
        finally:
            await watch.aclose()

    async def _check_producer(self, stream_id: str) -> bool:
        """A reader waiting on another process's stream: whether the stream has ended (or is
        gone); if its producer's lease ran out or its holder is known dead, hand it to
        ``on_orphan`` first (which writes the end the readers then get)."""
        record = await self.get(stream_id, with_text=False)
        if record is None or record.state.ended:
            return True
        lease = await self.lease(stream_id)
        handler = self.on_orphan
        if handler is None or lease is None or (
                lease.expires > time.time() and not known_dead(lease.owner)):
            return False
        try:
            outcome: Awaitable[object] = handler(stream_id)
            await outcome
        except Exception as error:  # the reader goes on; the next idle round looks again
            log.warning("stream %s: settling a stream without a producer failed: %s: %s",
                        stream_id, type(error).__name__, error)
            return False
        record = await self.get(stream_id, with_text=False)
        return record is None or record.state.ended
