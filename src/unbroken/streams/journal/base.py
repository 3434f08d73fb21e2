"""The journal: every stream the proxy serves, and every frame of it, in seq order.

One small interface, three implementations (``MemoryJournal`` for tests, ``SQLiteJournal`` by
default, ``RedisJournal`` for replicas). The proxy calls ``create`` before the stream's upstream
request leaves (write-ahead: status ``pending``), then ``answered`` with the response's media
type and headers, or ``discard`` if the upstream refused; the producer then calls
``submit`` with the frames of each turn of the event loop (its frames and new state land in one
transaction; a backend may fold the appends of many streams into one group commit) and
``append`` for the last ones, which it awaits. Readers call ``follow``: frames after a seq from
storage, then the live tail as it lands, woken by an in-process notification (``LiveTail``),
never by sleep-polling.

Several processes: the memory journal follows only streams produced in its own process
(``follows_other_processes`` is false: a reader of another process's stream gets what is
stored). The SQLite journal (processes of one host on one file) and ``RedisJournal`` (replicas)
are shared: their ``follow`` serves the live tail of a stream produced elsewhere (``SharedFollow``,
``shared_follow.py``), hands a stream whose producer's lease ran out or whose holder died to
``on_orphan``, and carries cancel requests to the producing process (``request_cancel`` ->
``on_cancel``).

The values it stores and returns (``StreamMeta``, ``StreamState``, ``FrameRecord``, ...) are in
``records.py``, re-exported here. Nothing secret is ever stored: credentials and stream tokens
only as SHA-256 hashes.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Sequence
from typing import Protocol

from ...finish import Status
from .listing import DEFAULT_PAGE, StreamPage, StreamQuery, page_of, stream_query
from .live import TAIL_FRAMES, LiveTail
from .records import (
    STATE_EVERY,
    FrameRecord,
    Lease,
    StreamMeta,
    StreamRecord,
    StreamState,
    Tombstone,
)

__all__ = [
    "FOLLOW_BATCH",
    "STATE_EVERY",
    "FrameRecord",
    "Journal",
    "JournalObserver",
    "Lease",
    "StreamMeta",
    "StreamRecord",
    "StreamState",
    "Tombstone",
]

FOLLOW_BATCH = 512
"""Frames read from storage per round trip when a reader catches up."""


class JournalObserver(Protocol):
    """Told about every append that landed and every commit (metrics, status logs)."""

    def landed(self, stream_id: str, frames: Sequence[FrameRecord],
               state: StreamState) -> None: ...

    def committed(self, seconds: float) -> None: ...


class Journal(ABC):
    """Persistence for streams and frames, plus the in-process live tails that wake readers."""

    follows_other_processes = False
    """Whether ``follow`` serves the live tail of a stream another process produces."""

    def __init__(self, *, tail_frames: int = TAIL_FRAMES) -> None:
        self._tails: dict[str, LiveTail] = {}
        self.is_open = False
        self._tail_frames = tail_frames
        self.observer: JournalObserver | None = None
        # Set by the proxy: a stream whose producer elsewhere is gone (its lease ran out), met
        # by a reader; and a cancel request for a stream, from any process (shared journals).
        self.on_orphan: Callable[[str], Awaitable[object]] | None = None
        self.on_cancel: Callable[[str], None] | None = None

    # -- storage (one implementation per backend) ---------------------------------------------

    async def open(self) -> None:
        """Prepare the storage (create tables, open connections)."""
        self.is_open = True

    async def close(self) -> None:
        """Release the storage."""
        self.is_open = False

    @abstractmethod
    async def _create(self, meta: StreamMeta, state: StreamState, lease: Lease | None) -> None:
        ...

    @abstractmethod
    def _store(
        self, stream_id: str, frames: Sequence[FrameRecord], state: StreamState
    ) -> asyncio.Future[None]:
        """Store (or queue for the next group commit) the frames and the state, in one
        transaction. Once they are durable, call ``_landed`` with them, then resolve the
        future; appends land in the order they were made."""

    @abstractmethod
    async def read_after(self, stream_id: str, seq: int, limit: int) -> list[FrameRecord]:
        """Up to ``limit`` frames with seq > ``seq``, in order."""

    @abstractmethod
    async def get(self, stream_id: str, *, with_text: bool = True) -> StreamRecord | None:
        """The stream, or ``None`` if unknown (or expired and purged). ``text`` is rebuilt from
        the frames only ``with_text``; access checks and resumes do without."""

    @abstractmethod
    async def _purge(self, older_than: float, keep: frozenset[str]) -> int: ...

    @abstractmethod
    async def _answered(self, meta: StreamMeta) -> None:
        """Replace the stored meta of a stream (``KeyError`` if it is unknown)."""

    @abstractmethod
    async def _discard(self, stream_id: str) -> None:
        """Delete a stream and everything that names it, leaving no tombstone."""

    @abstractmethod
    async def _list(self, query: StreamQuery) -> list[StreamRecord]:
        """Up to ``query.limit + 1`` streams that ``query`` admits (without text), newest
        first by ``(created, stream_id)``; their ``last_seq`` as ``get`` tells it."""

    @abstractmethod
    async def unfinished(self) -> list[str]:
        """Ids of streams whose stored status is not an end state."""

    @abstractmethod
    async def find_idempotent(self, idempotency_hash: str) -> StreamRecord | None:
        """The newest stream created with this idempotency hash (without text), if any."""

    @abstractmethod
    async def lease(self, stream_id: str) -> Lease | None:
        """The stream's producer lease, if it has one."""

    @abstractmethod
    async def set_lease(self, stream_id: str, lease: Lease) -> None:
        """Give the stream's lease to a (new) owner."""

    @abstractmethod
    async def renew_leases(self, owner: str, expires: float) -> int:
        """Extend every lease ``owner`` holds on a stream not ended; how many."""

    # -- the interface the proxy uses ---------------------------------------------------------

    async def list_streams(
        self,
        *,
        status: Status | Iterable[Status] | None = None,
        since: float | None = None,
        until: float | None = None,
        credential_hash: str | None = None,
        limit: int = DEFAULT_PAGE,
        cursor: str | None = None,
    ) -> StreamPage:
        """Stored streams newest first (``listing.py``): meta and state, no text, no frames.

        ``status``: one or several; ``since`` (inclusive) and ``until`` (exclusive): creation
        times in epoch seconds; ``credential_hash``: exactly the streams it created; ``limit``:
        1 to ``MAX_PAGE``; ``cursor``: a page's ``next_cursor``, for the page after it (give
        the same filters). ``ValueError`` for an argument out of range or a foreign cursor.
        """
        query = stream_query(status=status, since=since, until=until,
                             credential_hash=credential_hash, limit=limit, cursor=cursor)
        return page_of(await self._list(query), query)

    async def create(self, meta: StreamMeta, state: StreamState,
                     lease: Lease | None = None) -> LiveTail:
        """Store a new stream and open its live tail (the producer holds it until the end)."""
        tail = LiveTail(meta.stream_id, max_frames=self._tail_frames)
        self._tails[meta.stream_id] = tail
        try:
            await self._create(meta, state, lease)
        except BaseException:
            del self._tails[meta.stream_id]
            raise
        return tail

    async def answered(self, meta: StreamMeta) -> None:
        """The upstream answered a stream created before its request was sent (write-ahead):
        store what only the answer tells, its media type and response headers (``meta``, the
        rest as created)."""
        await self._answered(meta)

    async def discard(self, stream_id: str) -> None:
        """Forget a stream whose upstream request never started a generation (unreachable,
        or answered with an error status): its live tail ends, its record and idempotency
        key go, so the same request may be sent again."""
        self.release(stream_id)
        await self._discard(stream_id)

    async def reopen(self, stream_id: str, state: StreamState, lease: Lease) -> LiveTail:
        """Open a live tail again for a stream that ended ``interrupted`` and is continued
        (a Responses background stream re-attached upstream); ``state`` is its new state."""
        if stream_id in self._tails:
            raise ValueError(f"stream {stream_id} is live already")
        tail = LiveTail(stream_id, max_frames=self._tail_frames)
        tail.last_seq = state.last_seq  # older frames come from storage
        self._tails[stream_id] = tail
        try:
            await self.set_lease(stream_id, lease)
            await self.set_status(stream_id, state)
        except BaseException:
            self._tails.pop(stream_id, None)
            raise
        return tail

    def submit(
        self, stream_id: str, frames: Sequence[FrameRecord], state: StreamState
    ) -> asyncio.Future[None]:
        """Queue frames and state for the next group commit without waiting for it.

        The stream's readers are woken when the commit lands; the future tells the caller when
        (or that it failed). A producer submits once per upstream chunk and keeps reading, so
        everything that arrived in one turn of the event loop is one transaction.
        """
        return self._store(stream_id, frames, state)

    async def append(
        self, stream_id: str, frames: Sequence[FrameRecord], state: StreamState
    ) -> None:
        """Commit frames and state together and wait until they are durable.

        An append whose state is an end state closes the live tail once it lands: readers
        drain what is stored and stop.
        """
        # Shielded: the future may be shared by every append of one group commit, and one
        # caller's cancellation must not cancel the others' (the commit goes ahead anyway).
        await asyncio.shield(self._store(stream_id, frames, state))

    def _landed(self, stream_id: str, frames: Sequence[FrameRecord], state: StreamState) -> None:
        """Frames and state are durable: wake the stream's readers (and end its tail)."""
        if self.observer is not None:
            self.observer.landed(stream_id, frames, state)
        tail = self._tails.get(stream_id)
        if tail is None:
            return
        if frames:
            tail.publish(frames, ended=False)
        if state.ended:
            del self._tails[stream_id]
            tail.close()

    async def set_status(self, stream_id: str, state: StreamState) -> None:
        """Change the state without frames (an append of none)."""
        await self.append(stream_id, (), state)

    def tail(self, stream_id: str) -> LiveTail | None:
        """The live tail of a stream produced in this process, if it is still going."""
        return self._tails.get(stream_id)

    async def expire(self, older_than: float) -> int:
        """Delete streams not updated since ``older_than`` (never a live one); return how many.

        Each leaves a ``Tombstone``, itself purged by the next ``expire`` one retention later
        (tombstones older than ``older_than``)."""
        return await self._purge(older_than, frozenset(self._tails))

    async def claim_idempotent(self, idempotency_hash: str, claimer: str, ttl: float,
                               replacing: str | None = None) -> bool:
        """Reserve an idempotency key for one create, across the processes that share this
        journal, for ``ttl`` seconds (claiming it again extends it); whether ``claimer`` holds
        it. ``replacing``: a stream the key names that may be replaced (expired). A journal of
        one process lets every claim through: ``PendingKeys`` orders requests within it. The
        launcher also claims ``reattach:<stream id>`` here, so that one replica at a time
        continues a background stream upstream (within one process, the live tail decides)."""
        return True

    async def release_idempotent(self, idempotency_hash: str, claimer: str) -> None:
        """Give up a claim whose create did not happen (the upstream refused, say)."""
        return None  # nothing to give up where every claim went through

    async def problem(self) -> str | None:
        """Why the storage cannot be used right now (``GET /healthz`` answers 503 with it), or
        ``None``. A journal in this process's memory or files has none to report."""
        return None

    async def request_cancel(self, stream_id: str) -> bool:
        """Ask the process producing the stream to cancel it; whether the request could be
        sent (only a journal shared by several processes can: this one cannot)."""
        return False

    @abstractmethod
    async def tombstone(self, stream_id: str) -> Tombstone | None:
        """The tombstone of a purged stream, or ``None``."""

    def release(self, stream_id: str) -> None:
        """End a live tail whose producer stopped without its final append (a failed commit):
        readers drain what is stored and stop instead of waiting forever."""
        tail = self._tails.pop(stream_id, None)
        if tail is not None:
            tail.close()

    async def follow(
        self, stream_id: str, after: int, *, keepalive: float | None = None
    ) -> AsyncGenerator[list[FrameRecord], None]:
        """Batches of frames with seq > ``after``: stored ones, then live ones until the end.

        Each batch is what was available at once (one commit, or one storage read). An empty
        batch means ``keepalive`` seconds passed with nothing new (time for a keep-alive). A
        stream with no live tail in this process ends after what is stored.
        """
        cursor = after
        attached = tail = self._tails.get(stream_id)
        token = None if attached is None else attached.attach(after)
        clock = asyncio.get_running_loop().time
        quiet_since = clock()
        try:
            while True:
                tail = self._tails.get(stream_id) if tail is not None else None
                if tail is None:
                    ended = True
                    frames: list[FrameRecord] | None = None
                else:
                    # Read `ended` first: the end is published after the last frames, so if it
                    # is set now, everything is stored or cached by the read below.
                    ended = tail.ended
                    frames = tail.after(cursor)
                if frames is None:
                    frames = await self.read_after(stream_id, cursor, FOLLOW_BATCH)
                if frames:
                    yield frames
                    cursor = frames[-1].seq
                    if token is not None:
                        LiveTail.advance(token, cursor)  # read: the cache may let them go
                    quiet_since = clock()
                    continue
                if ended or tail is None:
                    return
                quiet = clock() - quiet_since
                if keepalive is not None and quiet >= keepalive:
                    yield []
                    quiet_since = clock()
                    continue
                # What is left of this reader's silence: the first keep-alive follows the last
                # frame by ``keepalive`` seconds, not by up to twice that.
                await tail.wait(None if keepalive is None else keepalive - quiet)
        finally:
            if attached is not None and token is not None:
                attached.detach(token)
