"""``RedisFollow``: how ``RedisJournal`` follows a stream, above all one another process produces.

A stream produced in this process is followed through its in-process ``LiveTail``, as in the
other journals. Another process's stream is followed in Redis: ``XREAD BLOCK`` on its frames
(``P{id}:f``) and on its ends stream (``P{id}:e``), so Redis itself wakes the reader when frames
or the end land, never sleep-polling. A reader idle for ``orphan_check`` seconds (``ORPHAN_CHECK``
by default) looks at the stream's producer lease, and hands a stream whose lease ran out to
``on_orphan`` (the proxy's recovery, which writes the end the reader then gets). One blocking
read never waits longer than that, and the connection's socket timeout is longer still
(``RedisJournal.open``), so a stream quiet for any length of time is never cut by a timeout.

Apart from ``redis_streams.py`` because it is the one part of the journal that waits on other
processes rather than writing or reading once; ``RedisJournal`` inherits it and supplies the
keys (``_key``) and the client (``_redis``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from abc import abstractmethod
from collections.abc import AsyncGenerator, Awaitable
from typing import Any, Final

from ...finish import END_STATES
from .base import FOLLOW_BATCH, FrameRecord, Journal
from .holder import known_dead
from .redis_records import frame_from

__all__ = ["ORPHAN_CHECK", "RedisFollow"]

ORPHAN_CHECK: Final = 5.0  # seconds a blocked reader waits before it looks at the lease
_ENDED: Final = frozenset(status.value for status in END_STATES)
log = logging.getLogger("unbroken.proxy")


class RedisFollow(Journal):
    """``follow`` for a journal in Redis: in-process streams by their live tail, the others by
    ``XREAD BLOCK``."""

    _redis: Any  # the redis-py client, ``None`` while the journal is closed
    orphan_check: float = ORPHAN_CHECK  # the longest one XREAD BLOCK waits

    @abstractmethod
    def _key(self, stream_id: str, kind: str) -> str:
        """The Redis key of one of a stream's values (``redis_scripts.py`` lists them)."""

    async def follow(
        self, stream_id: str, after: int, *, keepalive: float | None = None
    ) -> AsyncGenerator[list[FrameRecord], None]:
        """As ``Journal.follow``; a stream produced in another process is followed in Redis."""
        # aclosing: a reader that leaves early closes the inner generator at once (its
        # ``finally`` detaches from the live tail), not whenever it is garbage-collected.
        inner = (super().follow(stream_id, after, keepalive=keepalive)
                 if self._tails.get(stream_id) is not None
                 else self._follow_shared(stream_id, after, keepalive))
        async with contextlib.aclosing(inner):
            async for batch in inner:
                yield batch

    async def _follow_shared(
        self, stream_id: str, after: int, keepalive: float | None
    ) -> AsyncGenerator[list[FrameRecord], None]:
        frames_key, ends_key = self._key(stream_id, "f"), self._key(stream_id, "e")
        async with self._redis.pipeline(transaction=True) as pipe:  # one snapshot of both
            pipe.hget(self._key(stream_id, "s"), "status")
            pipe.xrevrange(ends_key, "+", "-", count=1)
            status, last_end = await pipe.execute()
        if status is None:
            return
        ended = status.decode() in _ENDED
        end_mark = last_end[0][0] if last_end else b"0-0"
        cursor = after
        clock = asyncio.get_running_loop().time
        quiet_since = clock()
        while True:
            frames = await self.read_after(stream_id, cursor, FOLLOW_BATCH)
            if frames:
                yield frames
                if ended and len(frames) < FOLLOW_BATCH:
                    return  # an ended stream's last frames: nothing more to read
                cursor = frames[-1].seq
                quiet_since = clock()
                continue
            if ended:
                return
            block = self.orphan_check
            wait = block if keepalive is None else max(
                0.001, min(block, keepalive - (clock() - quiet_since)))
            replies = await self._redis.xread(
                {frames_key: f"0-{cursor}", ends_key: end_mark},
                count=FOLLOW_BATCH, block=max(1, round(wait * 1000)))
            if not replies:
                if keepalive is not None and clock() - quiet_since >= keepalive:
                    yield []
                    quiet_since = clock()
                ended = await self._check_producer(stream_id)
                continue
            for key, entries in replies:
                if bytes(key).endswith(b":e"):
                    end_mark = entries[-1][0]
                    ended = await self._ended(stream_id)
                elif entries:
                    batch = [frame_from(entry) for entry in entries]
                    yield batch
                    cursor = batch[-1].seq
                    quiet_since = clock()

    async def _ended(self, stream_id: str) -> bool:
        status = await self._redis.hget(self._key(stream_id, "s"), "status")
        return status is None or status.decode() in _ENDED

    async def _check_producer(self, stream_id: str) -> bool:
        """A reader waiting on another process's stream: whether the stream has ended (or is
        gone); if its producer's lease ran out, hand it to ``on_orphan`` first (which writes
        the end the readers then get)."""
        status, owner, expires = await self._redis.hmget(
            self._key(stream_id, "s"), "status", "owner", "expires")
        if status is None or status.decode() in _ENDED:
            return True
        handler = self.on_orphan
        if handler is not None and owner and (
                float(expires) <= time.time() or known_dead(owner.decode())):
            try:
                outcome: Awaitable[object] = handler(stream_id)
                await outcome
            except Exception as error:  # the reader goes on; the next idle round looks again
                log.warning("stream %s: settling a stream without a producer failed: %s: %s",
                            stream_id, type(error).__name__, error)
        return False
