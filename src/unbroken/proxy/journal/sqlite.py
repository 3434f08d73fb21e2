"""``SQLiteJournal``: the default journal, one SQLite file in WAL mode.

Writes go through one writer thread that owns the only write connection: every append queued
while the previous transaction ran is committed in the next one (group commit across streams),
with ``synchronous=NORMAL`` (durable against a process crash; a power cut may lose the last
commits). Reads run on a small thread pool with their own read-only connections; in WAL mode they
never block the writer, and the event loop never waits on the disk.

Schema (``PRAGMA user_version`` = 1)::

    streams(stream_id PK, dialect, created, updated, status, finish_reason, raw_finish_reason,
            last_seq, usage JSON, error JSON, upstream_requests, provider_id, credential_hash,
            token_hash, media_type, request_path, response_headers JSON)
    frames(stream_id, seq, event, data BLOB, text, PRIMARY KEY (stream_id, seq)) WITHOUT ROWID
"""

from __future__ import annotations

import asyncio
import json
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

from ...finish import END_STATES, Status
from .base import FrameRecord, Journal, StreamMeta, StreamRecord, StreamState

__all__ = ["SCHEMA_VERSION", "SQLiteJournal"]

SCHEMA_VERSION: Final = 1
_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS streams (
    stream_id TEXT PRIMARY KEY,
    dialect TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    status TEXT NOT NULL,
    finish_reason TEXT,
    raw_finish_reason TEXT,
    last_seq INTEGER NOT NULL,
    usage TEXT,
    error TEXT,
    upstream_requests INTEGER NOT NULL,
    provider_id TEXT,
    credential_hash TEXT,
    token_hash TEXT NOT NULL,
    media_type TEXT NOT NULL,
    request_path TEXT NOT NULL,
    response_headers TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS streams_updated ON streams (updated);
CREATE TABLE IF NOT EXISTS frames (
    stream_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    event TEXT,
    data BLOB NOT NULL,
    text TEXT,
    PRIMARY KEY (stream_id, seq)
) WITHOUT ROWID;
"""
_STREAM_COLUMNS: Final = (
    "stream_id, dialect, created, updated, status, finish_reason, raw_finish_reason, last_seq, "
    "usage, error, upstream_requests, provider_id, credential_hash, token_hash, media_type, "
    "request_path, response_headers"
)
_UPDATE_STATE: Final = (
    "UPDATE streams SET updated = ?, status = ?, finish_reason = ?, raw_finish_reason = ?, "
    "last_seq = ?, usage = ?, error = ?, upstream_requests = ?, provider_id = ? "
    "WHERE stream_id = ?"
)
_MAX_BATCH: Final = 256  # queued writes folded into one transaction
_READ_THREADS: Final = 2

Write = Callable[[sqlite3.Connection], Any]


def _connect(path: str, *, read_only: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    if read_only:
        conn.execute("PRAGMA query_only=1")
    return conn


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class _Writer(threading.Thread):
    """The one thread that writes; resolves each caller's future on the event loop."""

    def __init__(self, path: str, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(name="unbroken-journal-writer", daemon=True)
        self._path = path
        self._loop = loop
        self._queue: queue.SimpleQueue[tuple[Write, asyncio.Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self.commits = 0  # transactions committed (for tests and benchmarks)

    def submit(self, write: Write) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = self._loop.create_future()
        self._queue.put((write, future))
        return future

    def stop(self) -> None:
        self._queue.put(None)
        self.join()

    def run(self) -> None:
        conn = _connect(self._path, read_only=False)
        try:
            while True:
                item = self._queue.get()
                if item is None:
                    return
                batch = [item]
                stopping = False
                while len(batch) < _MAX_BATCH:
                    try:
                        more = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        stopping = True
                        break
                    batch.append(more)
                outcomes = self._commit(conn, batch)
                try:
                    self._loop.call_soon_threadsafe(_resolve, outcomes)
                except RuntimeError:  # the loop closed under us: nobody is waiting any more
                    return
                if stopping:
                    return
        finally:
            conn.close()

    def _commit(
        self, conn: sqlite3.Connection, batch: list[tuple[Write, asyncio.Future[Any]]]
    ) -> list[tuple[asyncio.Future[Any], Any, BaseException | None]]:
        try:
            conn.execute("BEGIN")
            results: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = [
                (future, write(conn), None) for write, future in batch
            ]
            conn.execute("COMMIT")
            self.commits += 1
            return results
        except Exception:
            conn.execute("ROLLBACK")
        # One write failed: run each alone so only the faulty one reports the error.
        outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        for write, future in batch:
            try:
                conn.execute("BEGIN")
                result = write(conn)
                conn.execute("COMMIT")
                self.commits += 1
                outcomes.append((future, result, None))
            except Exception as error:
                conn.execute("ROLLBACK")
                outcomes.append((future, None, error))
        return outcomes


def _resolve(outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for future, result, error in outcomes:
        if future.cancelled():
            continue
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)


class SQLiteJournal(Journal):
    """Streams and frames in one SQLite file (WAL); survives a restart of the proxy."""

    def __init__(self, path: str, *, tail_frames: int = 256) -> None:
        super().__init__(tail_frames=tail_frames)
        self.path = path
        self._writer: _Writer | None = None
        self._readers: ThreadPoolExecutor | None = None
        self._local = threading.local()
        self._read_conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    @property
    def commits(self) -> int:
        return 0 if self._writer is None else self._writer.commits

    async def open(self) -> None:
        setup = _connect(self.path, read_only=False)
        try:
            version = setup.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"{self.path}: journal schema {version} is newer than this proxy's"
                    f" ({SCHEMA_VERSION})"
                )
            setup.executescript(_SCHEMA)
            setup.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        finally:
            setup.close()
        self._writer = _Writer(self.path, asyncio.get_running_loop())
        self._writer.start()
        self._readers = ThreadPoolExecutor(_READ_THREADS, thread_name_prefix="unbroken-journal")
        await super().open()

    async def close(self) -> None:
        if self._writer is not None:
            await asyncio.to_thread(self._writer.stop)
            self._writer = None
        if self._readers is not None:
            self._readers.shutdown(wait=True)
            self._readers = None
        with self._lock:
            for conn in self._read_conns:
                conn.close()
            self._read_conns.clear()
        await super().close()

    # -- plumbing -----------------------------------------------------------------------------

    async def _write(self, write: Write) -> Any:
        if self._writer is None:
            raise RuntimeError("the journal is not open")
        return await self._writer.submit(write)

    async def _read(self, read: Callable[[sqlite3.Connection], Any]) -> Any:
        if self._readers is None:
            raise RuntimeError("the journal is not open")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, self._run_read, read)

    def _run_read(self, read: Callable[[sqlite3.Connection], Any]) -> Any:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = _connect(self.path, read_only=True)
            with self._lock:
                self._read_conns.append(conn)
        return read(conn)

    # -- storage ------------------------------------------------------------------------------

    async def _create(self, meta: StreamMeta, state: StreamState) -> None:
        row = (
            meta.stream_id, meta.dialect, meta.created, state.updated, state.status.value,
            state.finish_reason, state.raw_finish_reason, state.last_seq, _dumps(state.usage),
            _dumps(state.error), state.upstream_requests, state.provider_id,
            meta.credential_hash, meta.token_hash, meta.media_type, meta.request_path,
            json.dumps(list(meta.response_headers)),
        )
        sql = f"INSERT INTO streams ({_STREAM_COLUMNS}) VALUES ({', '.join('?' * len(row))})"
        def write(conn: sqlite3.Connection) -> None:
            conn.execute(sql, row)

        await self._write(write)

    async def _store(
        self, stream_id: str, frames: Sequence[FrameRecord], state: StreamState
    ) -> None:
        rows = [(stream_id, f.seq, f.event, f.data, f.text or None) for f in frames]
        update = (
            state.updated, state.status.value, state.finish_reason, state.raw_finish_reason,
            state.last_seq, _dumps(state.usage), _dumps(state.error), state.upstream_requests,
            state.provider_id, stream_id,
        )

        def write(conn: sqlite3.Connection) -> None:
            if rows:
                conn.executemany("INSERT INTO frames VALUES (?, ?, ?, ?, ?)", rows)
            if conn.execute(_UPDATE_STATE, update).rowcount != 1:
                raise KeyError(f"unknown stream {stream_id!r}")

        await self._write(write)

    async def read_after(self, stream_id: str, seq: int, limit: int) -> list[FrameRecord]:
        def read(conn: sqlite3.Connection) -> list[FrameRecord]:
            rows = conn.execute(
                "SELECT seq, event, data, text FROM frames WHERE stream_id = ? AND seq > ? "
                "ORDER BY seq LIMIT ?",
                (stream_id, seq, limit),
            ).fetchall()
            return [FrameRecord(s, e, d, t or "") for s, e, d, t in rows]

        result: list[FrameRecord] = await self._read(read)
        return result

    async def get(self, stream_id: str, *, with_text: bool = True) -> StreamRecord | None:
        def read(conn: sqlite3.Connection) -> StreamRecord | None:
            conn.execute("BEGIN")  # one snapshot for the row and its frames
            try:
                row = conn.execute(
                    f"SELECT {_STREAM_COLUMNS} FROM streams WHERE stream_id = ?", (stream_id,)
                ).fetchone()
                if row is None:
                    return None
                if not with_text:
                    return _record(row, "")
                texts = conn.execute(
                    "SELECT text FROM frames WHERE stream_id = ? AND text IS NOT NULL "
                    "ORDER BY seq",
                    (stream_id,),
                ).fetchall()
            finally:
                conn.execute("COMMIT")
            return _record(row, "".join(text for (text,) in texts))

        result: StreamRecord | None = await self._read(read)
        return result

    async def _purge(self, older_than: float, keep: frozenset[str]) -> int:
        def write(conn: sqlite3.Connection) -> int:
            old = conn.execute(
                "SELECT stream_id FROM streams WHERE updated < ?", (older_than,)
            ).fetchall()
            gone = [(stream_id,) for (stream_id,) in old if stream_id not in keep]
            conn.executemany("DELETE FROM frames WHERE stream_id = ?", gone)
            conn.executemany("DELETE FROM streams WHERE stream_id = ?", gone)
            return len(gone)

        result: int = await self._write(write)
        return result

    async def unfinished(self) -> list[str]:
        ended = tuple(status.value for status in END_STATES)

        def read(conn: sqlite3.Connection) -> list[str]:
            marks = ", ".join("?" * len(ended))
            rows = conn.execute(
                f"SELECT stream_id FROM streams WHERE status NOT IN ({marks})", ended
            ).fetchall()
            return [stream_id for (stream_id,) in rows]

        result: list[str] = await self._read(read)
        return result


def _record(row: tuple[Any, ...], text: str) -> StreamRecord:
    (
        stream_id, dialect, created, updated, status, finish_reason, raw_finish_reason,
        last_seq, usage, error, upstream_requests, provider_id, credential_hash, token_hash,
        media_type, request_path, response_headers,
    ) = row
    meta = StreamMeta(
        stream_id=stream_id,
        dialect=dialect,
        created=created,
        media_type=media_type,
        token_hash=token_hash,
        credential_hash=credential_hash,
        request_path=request_path,
        response_headers=tuple((name, value) for name, value in json.loads(response_headers)),
    )
    state = StreamState(
        status=Status(status),
        updated=updated,
        last_seq=last_seq,
        finish_reason=finish_reason,
        raw_finish_reason=raw_finish_reason,
        usage=_loads(usage),
        error=_loads(error),
        upstream_requests=upstream_requests,
        provider_id=provider_id,
    )
    return StreamRecord(meta=meta, state=state, text=text)
