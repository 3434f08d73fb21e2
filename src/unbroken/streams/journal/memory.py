"""``MemoryJournal``: the journal in a dict, for tests and ``--store memory://``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ...finish import END_STATES
from .base import Journal
from .listing import StreamQuery
from .records import FrameRecord, Lease, StreamMeta, StreamRecord, StreamState, Tombstone

__all__ = ["MemoryJournal"]


@dataclass(slots=True)
class _Stored:
    meta: StreamMeta
    state: StreamState
    # frames[i] has seq i + 1: proxy seqs start at 1 and have no gaps.
    frames: list[FrameRecord] = field(default_factory=list)
    lease: Lease | None = None


class MemoryJournal(Journal):
    """Everything in process memory; lost on restart."""

    def __init__(self, *, tail_frames: int = 256) -> None:
        super().__init__(tail_frames=tail_frames)
        self._streams: dict[str, _Stored] = {}
        self._tombstones: dict[str, tuple[Tombstone, float]] = {}

    async def _create(self, meta: StreamMeta, state: StreamState, lease: Lease | None) -> None:
        if meta.stream_id in self._streams:
            raise KeyError(f"stream {meta.stream_id!r} exists")
        self._streams[meta.stream_id] = _Stored(meta=meta, state=state, lease=lease)

    def _store(
        self, stream_id: str, frames: Sequence[FrameRecord], state: StreamState
    ) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        stored = self._streams.get(stream_id)
        expected = 1 if stored is None else len(stored.frames) + 1
        bad = next((f.seq for i, f in enumerate(frames) if f.seq != expected + i), None)
        if stored is None or bad is not None:
            problem = f"unknown stream {stream_id!r}" if stored is None else (
                f"stream {stream_id}: seq {bad}, expected the next after {expected - 1}")
            future.set_exception(KeyError(problem) if stored is None else ValueError(problem))
            return future
        stored.frames.extend(frames)
        stored.state = state
        self._landed(stream_id, frames, state)
        future.set_result(None)
        return future

    async def read_after(self, stream_id: str, seq: int, limit: int) -> list[FrameRecord]:
        stored = self._streams.get(stream_id)
        if stored is None:
            return []
        start = max(0, seq)
        return stored.frames[start : start + limit]

    async def get(self, stream_id: str, *, with_text: bool = True) -> StreamRecord | None:
        stored = self._streams.get(stream_id)
        return None if stored is None else _record(stored, with_text=with_text)

    async def _list(self, query: StreamQuery) -> list[StreamRecord]:
        admitted = [stored for stored in self._streams.values()
                    if query.admits(stored.meta, stored.state)]
        admitted.sort(key=lambda stored: (stored.meta.created, stored.meta.stream_id),
                      reverse=True)
        return [_record(stored, with_text=False) for stored in admitted[: query.limit + 1]]

    async def _purge(self, older_than: float, keep: frozenset[str]) -> int:
        gone = [
            stream_id
            for stream_id, stored in self._streams.items()
            if stored.state.updated < older_than and stream_id not in keep
        ]
        now = time.time()
        self._tombstones = {k: v for k, v in self._tombstones.items() if v[1] >= older_than}
        for stream_id in gone:
            meta = self._streams.pop(stream_id).meta
            self._tombstones[stream_id] = (
                Tombstone(stream_id=stream_id, token_hash=meta.token_hash,
                          credential_hash=meta.credential_hash),
                now,
            )
        return len(gone)

    async def _answered(self, meta: StreamMeta) -> None:
        stored = self._streams.get(meta.stream_id)
        if stored is None:
            raise KeyError(f"unknown stream {meta.stream_id!r}")
        stored.meta = meta

    async def _discard(self, stream_id: str) -> None:
        self._streams.pop(stream_id, None)

    async def tombstone(self, stream_id: str) -> Tombstone | None:
        kept = self._tombstones.get(stream_id)
        return None if kept is None else kept[0]

    async def unfinished(self) -> list[str]:
        return [
            stream_id
            for stream_id, stored in self._streams.items()
            if stored.state.status not in END_STATES
        ]

    async def find_idempotent(self, idempotency_hash: str) -> StreamRecord | None:
        found = [stored for stored in self._streams.values()
                 if stored.meta.idempotency_hash == idempotency_hash]
        if not found:
            return None
        newest = max(found, key=lambda stored: stored.meta.created)
        return await self.get(newest.meta.stream_id, with_text=False)

    async def lease(self, stream_id: str) -> Lease | None:
        stored = self._streams.get(stream_id)
        return None if stored is None else stored.lease

    async def set_lease(self, stream_id: str, lease: Lease) -> None:
        stored = self._streams.get(stream_id)
        if stored is None:
            raise KeyError(f"unknown stream {stream_id!r}")
        stored.lease = lease

    async def renew_leases(self, owner: str, expires: float) -> int:
        renewed = 0
        for stored in self._streams.values():
            if (stored.lease is not None and stored.lease.owner == owner
                    and stored.state.status not in END_STATES):
                stored.lease = Lease(owner, expires)
                renewed += 1
        return renewed


def _record(stored: _Stored, *, with_text: bool) -> StreamRecord:
    text = "".join(frame.text for frame in stored.frames) if with_text else ""
    # A live stream's state is rewritten lazily; its frames always know the last seq.
    state = stored.state
    if state.last_seq < len(stored.frames):
        state = replace(state, last_seq=len(stored.frames))
    return StreamRecord(meta=stored.meta, state=state, text=text)
