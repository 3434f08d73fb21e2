"""``SQLiteJournal``: the default journal, one SQLite file in WAL mode.

Writes are group-committed on the event loop's own thread: every append made while the loop
handled one round of ready sockets is queued, and one transaction, run at the start of the next
round (or, under load, when the commit window since the last commit has passed: 1 ms, widened
up to 8 ms while commits cost more than a tenth of it), commits them all, across streams, then
wakes the callers. No thread hand-off sits on the hot path: with the GIL, a hop to a writer
thread and back costs more than the commit, whose
``synchronous=NORMAL`` in WAL mode is a ``write()`` to the log and no ``fsync``. The one slow
thing SQLite does, the checkpoint (which does ``fsync``), is taken off the loop: automatic
checkpoints are off and a background thread runs a passive checkpoint every second. Reads use
their own connection; in WAL mode readers never block the writer, nor it them. The batch of one
group commit (``GroupCommit``) and the checkpoint thread (``Checkpointer``) are in
``sqlite_commit.py``; when a commit runs, and whom it wakes, is decided here.

Schema (``PRAGMA user_version`` = 6; older files are upgraded in one transaction when opened;
the DDL, the upgrades and the row mapping are in ``sqlite_schema.py``)::

    streams(stream_id PK, dialect, created, updated, status, finish_reason, raw_finish_reason,
            last_seq, usage JSON, error JSON, upstream_requests, provider_id, credential_hash,
            token_hash, media_type, request_path, response_headers JSON,
            idempotency_hash, request_hash, background,       -- version 2
            lease_owner, lease_expires)                       -- version 2
    frames(id INTEGER PRIMARY KEY, stream_id, seq, event, data BLOB, text,  -- arrival order
           at)                                  -- version 4: receive time, NULL = unknown
    UNIQUE INDEX frames_by_stream ON frames (stream_id, seq)                  -- version 3
    INDEX streams_created (created, stream_id), streams_by_credential         -- version 5
          (credential_hash, created, stream_id): listings, newest first
    claims(key PK, claimer, expires)            -- version 6: idempotency keys being created

Several processes on one file (``unbroken proxy --workers N``, or apps of ``unbroken.server``):
a reader follows a stream another process produces (``SharedFollow``), woken by that process's
notices after each commit (``sqlite_notices.py``); a cancel is carried to the producer the same
way. Only processes of one host can: the pid in the stream's lease names the producer.

``read_only=True`` opens an existing file only to read it (``unbroken streams``): no writer, no
checkpointer, no upgrade, nothing created.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from ...finish import END_STATES
from .holder import local_pid
from .listing import StreamQuery
from .records import FrameRecord, Lease, StreamMeta, StreamRecord, StreamState, Tombstone
from .shared_follow import SharedFollow, Watch
from .sqlite_commit import Checkpointer, GroupCommit, Write
from .sqlite_notices import CommitNotices, NoticeWatch
from .sqlite_schema import (
    SCHEMA_VERSION,
    STREAM_COLUMNS,
    connect,
    connect_existing,
    dumps,
    listing_select,
    prepare,
    record_from_row,
    stream_row,
)

__all__ = ["SCHEMA_VERSION", "SQLiteJournal"]

CHECKPOINT_EVERY: Final = 1.0  # seconds between passive checkpoints (off the event loop)
COMMIT_WINDOW: Final = 0.001  # seconds: under load, at most one group commit per window ...
# ... which widens, up to COMMIT_WINDOW_MAX, to keep group commits to about COMMIT_SHARE of the
# loop's time: a commit costs ~0.13 ms however few rows it holds (~12 µs more per frame), so
# many slow streams committed every millisecond pay it for 2-3 frames each.
COMMIT_SHARE: Final = 0.1
COMMIT_WINDOW_MAX: Final = 0.008
_CLOSE_BUSY_MS: Final = 1000  # the last checkpoint waits this long for other processes at most


class SQLiteJournal(SharedFollow):
    """Streams and frames in one SQLite file (WAL); survives a restart of the proxy."""

    def __init__(self, path: str, *, tail_frames: int = 256,
                 checkpoint_every: float = CHECKPOINT_EVERY,
                 commit_window: float = COMMIT_WINDOW, read_only: bool = False) -> None:
        super().__init__(tail_frames=tail_frames)
        self.path = path
        self.read_only = read_only
        self.commits = 0  # transactions committed (for tests and benchmarks)
        self._checkpoint_every = checkpoint_every
        self._writer: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        self._checkpointer: Checkpointer | None = None
        self._batch: GroupCommit | None = None  # what the next group commit holds
        self._commit_window = commit_window
        self._window = commit_window  # the current one (see COMMIT_SHARE)
        self._last_flush = float("-inf")
        self._written: dict[str, StreamState] = {}  # the state last written, per live stream
        self._notices = CommitNotices(path, live=self._tails.__contains__,
                                      on_cancel=self._cancel_here)

    def _cancel_here(self, stream_id: str) -> None:
        if self.on_cancel is not None:
            self.on_cancel(stream_id)

    async def open(self) -> None:
        if self.read_only:
            self._reader = connect_existing(self.path)
            await super().open()
            return
        prepare(self.path)
        self._writer = connect(self.path, read_only=False)
        self._reader = connect(self.path, read_only=True)
        self._checkpointer = Checkpointer(self.path, self._checkpoint_every)
        self._checkpointer.start()
        await self._notices.serve()
        await super().open()

    async def close(self) -> None:
        if self._batch is not None:
            self._flush()
        await self._notices.close()
        if self._checkpointer is not None:
            await asyncio.to_thread(self._checkpointer.stop)
            self._checkpointer = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._writer is not None:
            # Bounded: another process on the file (``--workers``) may hold it; it checkpoints
            # on its own, so a busy file is left as it is.
            self._writer.execute(f"PRAGMA busy_timeout = {_CLOSE_BUSY_MS}")
            with contextlib.suppress(sqlite3.OperationalError):
                self._writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._writer.close()
            self._writer = None
        await super().close()

    # -- plumbing -----------------------------------------------------------------------------

    def _next_batch(self) -> GroupCommit:
        """The batch the next group commit holds; the first write of a turn schedules it."""
        batch = self._batch
        if batch is None:
            if self._writer is None:
                raise RuntimeError("the journal is read-only" if self.read_only and self.is_open
                                   else "the journal is not open")
            loop = asyncio.get_running_loop()
            batch = self._batch = GroupCommit(loop.create_future())
            # Right away after a quiet spell; under load at most one commit per window, so a
            # busy proxy makes few large transactions instead of one per frame.
            due = self._last_flush + self._window
            if loop.time() >= due:
                loop.call_soon(self._flush)
            else:
                loop.call_at(due, self._flush)
        return batch

    async def _write(self, write: Write) -> Any:
        """Run ``write`` in the next group commit; its result once the commit landed."""
        batch = self._next_batch()
        index = len(batch.writes)
        batch.writes.append(write)
        results = await asyncio.shield(batch.future)
        return results[index]

    def _flush(self) -> None:
        """Commit the batch, wake the readers of what landed (in order), then the writers."""
        batch, self._batch = self._batch, None
        if batch is None:
            return
        self._last_flush = asyncio.get_running_loop().time()
        started = time.perf_counter()
        cpu = time.thread_time()
        try:
            if self._writer is None:
                raise RuntimeError("the journal closed")
            results = batch.commit(self._writer)
        except Exception as error:  # every writer of the batch learns it
            if not batch.future.cancelled():
                batch.future.set_exception(error)
            return
        # The commit's own CPU (not its wall time, which a busy machine stretches).
        self._window = min(COMMIT_WINDOW_MAX, max(
            self._commit_window, (time.thread_time() - cpu) / COMMIT_SHARE))
        self.commits += 1
        if self.observer is not None:
            self.observer.committed(time.perf_counter() - started)
        for stream_id, frames, state in batch.appends:
            self._landed(stream_id, frames, state)
        self._notices.landed(batch.appends)
        if not batch.future.cancelled():
            batch.future.set_result(results)

    def _read(self, read: Callable[[sqlite3.Connection], Any]) -> Any:
        if self._reader is None:
            raise RuntimeError("the journal is not open")
        return read(self._reader)

    # -- other processes ----------------------------------------------------------------------

    async def _watch(self, stream_id: str) -> Watch | None:
        record = await self.get(stream_id, with_text=False)
        if record is None:
            return None
        lease = None if record.state.ended else await self.lease(stream_id)
        watch = NoticeWatch(self._notices, stream_id,
                            None if lease is None else local_pid(lease.owner),
                            ended=record.state.ended)
        await watch.start()
        return watch

    def release(self, stream_id: str) -> None:
        super().release(stream_id)
        self._notices.gone(stream_id)

    async def claim_idempotent(self, idempotency_hash: str, claimer: str, ttl: float,
                               replacing: str | None = None) -> bool:
        """As ``Journal.claim_idempotent``, across the processes on this file: held by
        ``claimer`` unless another holds it unexpired, or a stream made with the key exists
        (other than ``replacing``)."""
        def write(conn: sqlite3.Connection) -> bool:
            now = time.time()
            made = conn.execute(
                "SELECT stream_id FROM streams WHERE idempotency_hash = ? "
                "ORDER BY created DESC LIMIT 1", (idempotency_hash,)).fetchone()
            if made is not None and made[0] != replacing:
                return False
            held = conn.execute("SELECT claimer, expires FROM claims WHERE key = ?",
                                (idempotency_hash,)).fetchone()
            if held is not None and held[0] != claimer and held[1] > now:
                return False
            conn.execute("INSERT OR REPLACE INTO claims (key, claimer, expires) "
                         "VALUES (?, ?, ?)", (idempotency_hash, claimer, now + ttl))
            return True

        held: bool = await self._write(write)
        return held

    async def release_idempotent(self, idempotency_hash: str, claimer: str) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM claims WHERE key = ? AND claimer = ?",
                         (idempotency_hash, claimer))

        await self._write(write)

    async def request_cancel(self, stream_id: str) -> bool:
        """Ask the process of this host that produces the stream to cancel it."""
        lease = await self.lease(stream_id)
        pid = None if lease is None else local_pid(lease.owner)
        link = None if pid is None else await self._notices.link(pid)
        if link is None:
            return False
        link.send("x" + stream_id)
        return True

    # -- storage ------------------------------------------------------------------------------

    async def _create(self, meta: StreamMeta, state: StreamState, lease: Lease | None) -> None:
        row = stream_row(meta, state, lease)
        sql = f"INSERT INTO streams ({STREAM_COLUMNS}, lease_owner, lease_expires) " \
              f"VALUES ({', '.join('?' * len(row))})"

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(sql, row)

        await self._write(write)
        self._written[meta.stream_id] = state

    def _store(
        self, stream_id: str, frames: Sequence[FrameRecord], state: StreamState
    ) -> asyncio.Future[Any]:
        batch = self._next_batch()
        batch.rows += [(stream_id, f.seq, f.event, f.data, f.text or None, f.at or None)
                       for f in frames]
        batch.appends.append((stream_id, frames, state))
        # The stream's row is rewritten when something in it changes, but only about once a
        # second for progress alone: a live stream's last seq is read from its frames anyway.
        if state.must_write_after(self._written.get(stream_id)):
            batch.updates.append((
                state.updated, state.status.value, state.finish_reason, state.raw_finish_reason,
                state.last_seq, dumps(state.usage), dumps(state.error),
                state.upstream_requests, state.provider_id, stream_id,
            ))
            if state.ended:
                self._written.pop(stream_id, None)
            else:
                self._written[stream_id] = state
        return batch.future

    async def read_after(self, stream_id: str, seq: int, limit: int) -> list[FrameRecord]:
        def read(conn: sqlite3.Connection) -> list[FrameRecord]:
            rows = conn.execute(
                "SELECT seq, event, data, text, at FROM frames WHERE stream_id = ? AND seq > ? "
                "ORDER BY seq LIMIT ?",
                (stream_id, seq, limit),
            ).fetchall()
            return [FrameRecord(s, e, d, t or "", a or 0.0) for s, e, d, t, a in rows]

        result: list[FrameRecord] = self._read(read)
        return result

    async def get(self, stream_id: str, *, with_text: bool = True) -> StreamRecord | None:
        def read(conn: sqlite3.Connection) -> StreamRecord | None:
            conn.execute("BEGIN")  # one snapshot for the row and its frames
            try:
                row = conn.execute(
                    f"SELECT {STREAM_COLUMNS} FROM streams WHERE stream_id = ?", (stream_id,)
                ).fetchone()
                if row is None:
                    return None
                (last_seq,) = conn.execute(
                    "SELECT MAX(seq) FROM frames WHERE stream_id = ?", (stream_id,)
                ).fetchone()
                texts = [] if not with_text else conn.execute(
                    "SELECT text FROM frames WHERE stream_id = ? AND text IS NOT NULL "
                    "ORDER BY seq",
                    (stream_id,),
                ).fetchall()
            finally:
                conn.execute("COMMIT")
            return record_from_row(row, "".join(text for (text,) in texts), last_seq)

        result: StreamRecord | None = self._read(read)
        return result

    async def _purge(self, older_than: float, keep: frozenset[str]) -> int:
        def write(conn: sqlite3.Connection) -> int:
            old = conn.execute(
                "SELECT stream_id FROM streams WHERE updated < ?", (older_than,)
            ).fetchall()
            gone = [(stream_id,) for (stream_id,) in old if stream_id not in keep]
            conn.execute("DELETE FROM tombstones WHERE expired_at < ?", (older_than,))
            conn.execute("DELETE FROM claims WHERE expires < ?", (now,))
            conn.executemany(
                "INSERT OR REPLACE INTO tombstones (stream_id, token_hash, credential_hash, "
                "expired_at) SELECT stream_id, token_hash, credential_hash, ? FROM streams "
                "WHERE stream_id = ?",
                [(now, stream_id) for (stream_id,) in gone],
            )
            conn.executemany("DELETE FROM frames WHERE stream_id = ?", gone)
            conn.executemany("DELETE FROM streams WHERE stream_id = ?", gone)
            return len(gone)

        now = time.time()

        result: int = await self._write(write)
        return result

    async def _answered(self, meta: StreamMeta) -> None:
        row = (meta.media_type, json.dumps(list(meta.response_headers)), meta.stream_id)

        def write(conn: sqlite3.Connection) -> None:
            updated = conn.execute(
                "UPDATE streams SET media_type = ?, response_headers = ? WHERE stream_id = ?",
                row).rowcount
            if updated != 1:
                raise KeyError(f"unknown stream {meta.stream_id!r}")

        await self._write(write)

    async def _discard(self, stream_id: str) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM frames WHERE stream_id = ?", (stream_id,))
            conn.execute("DELETE FROM streams WHERE stream_id = ?", (stream_id,))

        self._written.pop(stream_id, None)
        await self._write(write)

    async def tombstone(self, stream_id: str) -> Tombstone | None:
        def read(conn: sqlite3.Connection) -> Tombstone | None:
            row = conn.execute(
                "SELECT token_hash, credential_hash FROM tombstones WHERE stream_id = ?",
                (stream_id,),
            ).fetchone()
            if row is None:
                return None
            return Tombstone(stream_id=stream_id, token_hash=row[0], credential_hash=row[1])

        found: Tombstone | None = self._read(read)
        return found

    async def _list(self, query: StreamQuery) -> list[StreamRecord]:
        sql, params = listing_select(query)

        def read(conn: sqlite3.Connection) -> list[StreamRecord]:
            return [record_from_row(row[:-1], "", row[-1])
                    for row in conn.execute(sql, params).fetchall()]

        found: list[StreamRecord] = self._read(read)
        return found

    async def unfinished(self) -> list[str]:
        ended = tuple(status.value for status in END_STATES)

        def read(conn: sqlite3.Connection) -> list[str]:
            marks = ", ".join("?" * len(ended))
            rows = conn.execute(
                f"SELECT stream_id FROM streams WHERE status NOT IN ({marks})", ended
            ).fetchall()
            return [stream_id for (stream_id,) in rows]

        result: list[str] = self._read(read)
        return result

    async def find_idempotent(self, idempotency_hash: str) -> StreamRecord | None:
        def read(conn: sqlite3.Connection) -> str | None:
            row = conn.execute(
                "SELECT stream_id FROM streams WHERE idempotency_hash = ? "
                "ORDER BY created DESC LIMIT 1",
                (idempotency_hash,),
            ).fetchone()
            return None if row is None else str(row[0])

        stream_id: str | None = self._read(read)
        return None if stream_id is None else await self.get(stream_id, with_text=False)

    async def lease(self, stream_id: str) -> Lease | None:
        def read(conn: sqlite3.Connection) -> Lease | None:
            row = conn.execute(
                "SELECT lease_owner, lease_expires FROM streams WHERE stream_id = ?",
                (stream_id,),
            ).fetchone()
            if row is None or row[0] is None:
                return None
            return Lease(row[0], row[1])

        result: Lease | None = self._read(read)
        return result

    async def set_lease(self, stream_id: str, lease: Lease) -> None:
        def write(conn: sqlite3.Connection) -> None:
            updated = conn.execute(
                "UPDATE streams SET lease_owner = ?, lease_expires = ? WHERE stream_id = ?",
                (lease.owner, lease.expires, stream_id),
            ).rowcount
            if updated != 1:
                raise KeyError(f"unknown stream {stream_id!r}")

        await self._write(write)

    async def renew_leases(self, owner: str, expires: float) -> int:
        def write(conn: sqlite3.Connection) -> int:
            # The live statuses spelled as in the partial index, so that SQLite uses it: the
            # heartbeat touches this process's live streams, not every retained row.
            return conn.execute(
                "UPDATE streams SET lease_expires = ? WHERE lease_owner = ? "
                "AND status IN ('pending', 'streaming')",
                (expires, owner),
            ).rowcount

        result: int = await self._write(write)
        return result
