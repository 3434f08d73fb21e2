"""``RedisFollow``: the Redis backend of ``SharedFollow``, following another process's stream.

The watch blocks on Redis: ``XREAD BLOCK`` on the stream's frames (``P{id}:f``) and on its ends
stream (``P{id}:e``), so Redis itself wakes the reader when frames or the end land, and brings
the frames with it. One blocking read never waits longer than ``orphan_check`` (the loop in
``shared_follow.py`` then looks at the producer's lease), and the connection's socket timeout is
longer still (``RedisJournal.open``), so a stream quiet for any length of time is never cut by a
timeout.

Apart from ``redis_streams.py`` because it is the one part of the journal that waits on other
processes rather than writing or reading once; ``RedisJournal`` inherits it and supplies the
keys (``_key``) and the client (``_redis``).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, Final

from ...finish import END_STATES
from .base import FOLLOW_BATCH, FrameRecord
from .redis_records import frame_from
from .shared_follow import ORPHAN_CHECK, SharedFollow, Watch

__all__ = ["ORPHAN_CHECK", "RedisFollow"]

_ENDED: Final = frozenset(status.value for status in END_STATES)


class RedisFollow(SharedFollow):
    """``SharedFollow`` whose watch is ``XREAD BLOCK`` on the stream's frames and ends."""

    _redis: Any  # the redis-py client, ``None`` while the journal is closed

    @abstractmethod
    def _key(self, stream_id: str, kind: str) -> str:
        """The Redis key of one of a stream's values (``redis_scripts.py`` lists them)."""

    async def _watch(self, stream_id: str) -> Watch | None:
        async with self._redis.pipeline(transaction=True) as pipe:  # one snapshot of both
            pipe.hget(self._key(stream_id, "s"), "status")
            pipe.xrevrange(self._key(stream_id, "e"), "+", "-", count=1)
            status, last_end = await pipe.execute()
        if status is None:
            return None
        return _RedisWatch(self, stream_id, ended=status.decode() in _ENDED,
                           end_mark=last_end[0][0] if last_end else b"0-0")

    async def _ended(self, stream_id: str) -> bool:
        status = await self._redis.hget(self._key(stream_id, "s"), "status")
        return status is None or status.decode() in _ENDED


class _RedisWatch:
    """One reader's ``XREAD BLOCK`` on a stream's frames and ends."""

    def __init__(self, journal: RedisFollow, stream_id: str, *, ended: bool,
                 end_mark: bytes) -> None:
        self._journal = journal
        self._stream_id = stream_id
        self._frames_key = journal._key(stream_id, "f")
        self._ends_key = journal._key(stream_id, "e")
        self._end_mark = end_mark
        self.ended = ended

    async def wait(self, cursor: int, timeout: float) -> list[FrameRecord] | None:
        replies = await self._journal._redis.xread(
            {self._frames_key: f"0-{cursor}", self._ends_key: self._end_mark},
            count=FOLLOW_BATCH, block=max(1, round(timeout * 1000)))
        if not replies:
            return None
        brought: list[FrameRecord] = []
        for key, entries in replies:
            if bytes(key).endswith(b":e"):
                self._end_mark = entries[-1][0]
                self.ended = await self._journal._ended(self._stream_id)
            elif entries:
                brought = [frame_from(entry) for entry in entries]
        return brought

    async def aclose(self) -> None:
        return None  # a blocking read holds nothing between waits
