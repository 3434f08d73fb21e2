"""The SQLite journal's schema, its upgrades, and the mapping between rows and records.

Version 1 had the stream and frame columns; version 2 added the idempotency and request hashes,
the background flag and the producer lease (owner, expiry), with partial indexes for idempotent
lookups and for the heartbeat of live streams. Version 3 keeps frames in arrival order (a rowid
table) with a unique index on ``(stream_id, seq)``: a group commit of N live streams then
appends its rows to one end of the table and touches N small index pages, where the clustered
``WITHOUT ROWID`` table of versions 1 and 2 rewrote N full leaves (1.5-2x the cost per commit,
``benchmarks/README.md``). Version 4 adds each frame's receive time (``at``, epoch seconds;
NULL for the frames of an upgraded file, read back as ``0.0``: unknown). Version 5 adds the
listing's indexes (``Journal.list_streams``, newest first): ``streams_created`` on ``(created,
stream_id)`` and ``streams_by_credential`` on ``(credential_hash, created, stream_id)``, so that
a page is a walk down one index (a status filter is checked on the rows walked). Version 6
adds ``claims``: an idempotency key reserved by one process's create for a while, so that
processes sharing the file (``--workers``) start one stream per key. ``prepare``
creates a file or upgrades it in place, in one transaction; ``connect_existing`` opens a file
only to read it (the ``unbroken streams`` command: no file made, no upgrade).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, Final

from ...finish import Status
from .listing import StreamQuery
from .records import Lease, StreamMeta, StreamRecord, StreamState

__all__ = [
    "INSERT_FRAMES",
    "SCHEMA_VERSION",
    "STREAM_COLUMNS",
    "UPDATE_STATE",
    "connect",
    "connect_existing",
    "dumps",
    "listing_select",
    "loads",
    "prepare",
    "record_from_row",
    "stream_row",
]

SCHEMA_VERSION: Final = 6
READABLE_FROM: Final = 4  # the oldest schema the read-only opening reads (frames with times)
SCHEMA: Final = """
-- version 6: an idempotency key claimed by one process's create, until it expires
CREATE TABLE IF NOT EXISTS claims (
    key TEXT PRIMARY KEY,
    claimer TEXT NOT NULL,
    expires REAL NOT NULL
) WITHOUT ROWID;
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
    response_headers TEXT NOT NULL,
    idempotency_hash TEXT,
    request_hash TEXT,
    background INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_expires REAL
);
CREATE INDEX IF NOT EXISTS streams_updated ON streams (updated);
CREATE TABLE IF NOT EXISTS frames (
    id INTEGER PRIMARY KEY,
    stream_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    event TEXT,
    data BLOB NOT NULL,
    text TEXT,
    at REAL
);
CREATE UNIQUE INDEX IF NOT EXISTS frames_by_stream ON frames (stream_id, seq);
CREATE INDEX IF NOT EXISTS streams_idempotency ON streams (idempotency_hash)
    WHERE idempotency_hash IS NOT NULL;
CREATE INDEX IF NOT EXISTS streams_live_leases ON streams (lease_owner)
    WHERE status IN ('pending', 'streaming');
-- version 5: listings, newest first (all streams; one credential's)
CREATE INDEX IF NOT EXISTS streams_created ON streams (created, stream_id);
CREATE INDEX IF NOT EXISTS streams_by_credential ON streams (credential_hash, created, stream_id)
    WHERE credential_hash IS NOT NULL;
-- purged streams, kept one more retention period: an owner's EventSource gets 204, not 404
CREATE TABLE IF NOT EXISTS tombstones (
    stream_id TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL,
    credential_hash TEXT,
    expired_at REAL NOT NULL
) WITHOUT ROWID;
"""
UPGRADE_FROM_1: Final = (
    "ALTER TABLE streams ADD COLUMN idempotency_hash TEXT",
    "ALTER TABLE streams ADD COLUMN request_hash TEXT",
    "ALTER TABLE streams ADD COLUMN background INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE streams ADD COLUMN lease_owner TEXT",
    "ALTER TABLE streams ADD COLUMN lease_expires REAL",
)
UPGRADE_FROM_3: Final = ("ALTER TABLE frames ADD COLUMN at REAL",)
# Version 2 frames (a clustered table, renamed aside) copied into the version 3 table, in order.
UPGRADE_FRAMES_FROM_2: Final = (
    "INSERT INTO frames (stream_id, seq, event, data, text) "
    "SELECT stream_id, seq, event, data, text FROM frames_v2 ORDER BY stream_id, seq",
    "DROP TABLE frames_v2",
)
STREAM_COLUMNS: Final = (
    "stream_id, dialect, created, updated, status, finish_reason, raw_finish_reason, last_seq, "
    "usage, error, upstream_requests, provider_id, credential_hash, token_hash, media_type, "
    "request_path, response_headers, idempotency_hash, request_hash, background"
)
UPDATE_STATE: Final = (
    "UPDATE streams SET updated = ?, status = ?, finish_reason = ?, raw_finish_reason = ?, "
    "last_seq = ?, usage = ?, error = ?, upstream_requests = ?, provider_id = ? "
    "WHERE stream_id = ?"
)
INSERT_FRAMES: Final = (
    "INSERT INTO frames (stream_id, seq, event, data, text, at) VALUES (?, ?, ?, ?, ?, ?)"
)


def connect(path: str, *, read_only: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    if read_only:
        conn.execute("PRAGMA query_only=1")
    else:
        conn.execute("PRAGMA wal_autocheckpoint=0")  # the checkpointer thread does it
    return conn


def connect_existing(path: str) -> sqlite3.Connection:
    """A read-only connection to an existing journal file of a schema this version reads;
    ``FileNotFoundError`` or ``RuntimeError`` (with the reason) otherwise."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such journal file")
    conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True,
                           isolation_level=None, check_same_thread=False, timeout=30.0)
    try:
        conn.execute("PRAGMA query_only=1")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    except BaseException:
        conn.close()
        raise
    if not READABLE_FROM <= version <= SCHEMA_VERSION:
        conn.close()
        raise RuntimeError(
            f"{path}: journal schema {version}, this version reads {READABLE_FROM} to "
            f"{SCHEMA_VERSION}" + (" (start this version's proxy on it once to upgrade it)"
                                   if 0 < version < READABLE_FROM else ""))
    return conn


def listing_select(query: StreamQuery) -> tuple[str, list[Any]]:
    """The ``SELECT`` of one listing page (``limit + 1`` rows: ``STREAM_COLUMNS``, then the
    stream's highest frame seq), walking ``streams_by_credential`` or ``streams_created``."""
    where: list[str] = []
    params: list[Any] = []
    if query.credential_hash is not None:
        where.append("credential_hash = ?")
        params.append(query.credential_hash)
    if query.statuses:
        where.append(f"status IN ({', '.join('?' * len(query.statuses))})")
        params += sorted(status.value for status in query.statuses)
    if query.since is not None:
        where.append("created >= ?")
        params.append(query.since)
    if query.until is not None:
        where.append("created < ?")
        params.append(query.until)
    if query.before is not None:
        where.append("(created, stream_id) < (?, ?)")
        params += query.before
    sql = (f"SELECT {STREAM_COLUMNS}, (SELECT MAX(seq) FROM frames "
           "WHERE frames.stream_id = streams.stream_id) FROM streams "
           + ("WHERE " + " AND ".join(where) + " " if where else "")
           + "ORDER BY created DESC, stream_id DESC LIMIT ?")
    return sql, [*params, query.limit + 1]


def dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def prepare(path: str) -> None:
    """Create the tables, or bring an older file to ``SCHEMA_VERSION``; refuse a newer one."""
    setup = connect(path, read_only=False)
    try:
        version = setup.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise RuntimeError(
                f"{path}: journal schema {version} is newer than this proxy's"
                f" ({SCHEMA_VERSION})"
            )
        steps: list[str] = []
        if 0 < version < 2:
            steps += UPGRADE_FROM_1
        if 0 < version < 3:
            steps.append("ALTER TABLE frames RENAME TO frames_v2")
        if version == 3:
            steps += UPGRADE_FROM_3
        steps.append(SCHEMA.strip().rstrip(";"))
        if 0 < version < 3:
            steps += UPGRADE_FRAMES_FROM_2
        steps.append(f"PRAGMA user_version = {SCHEMA_VERSION}")
        try:
            setup.executescript("BEGIN IMMEDIATE;\n" + ";\n".join(steps) + ";\nCOMMIT;")
        except BaseException:
            if setup.in_transaction:  # an upgrade lands whole or not at all
                setup.execute("ROLLBACK")
            raise
    finally:
        setup.close()


def stream_row(meta: StreamMeta, state: StreamState, lease: Lease | None) -> tuple[Any, ...]:
    """The values of a new ``streams`` row: ``STREAM_COLUMNS``, then the lease's two."""
    return (
        meta.stream_id, meta.dialect, meta.created, state.updated, state.status.value,
        state.finish_reason, state.raw_finish_reason, state.last_seq, dumps(state.usage),
        dumps(state.error), state.upstream_requests, state.provider_id,
        meta.credential_hash, meta.token_hash, meta.media_type, meta.request_path,
        json.dumps(list(meta.response_headers)), meta.idempotency_hash, meta.request_hash,
        int(meta.background),
        None if lease is None else lease.owner, None if lease is None else lease.expires,
    )


def record_from_row(row: tuple[Any, ...], text: str, frames_last_seq: int | None) -> StreamRecord:
    (
        stream_id, dialect, created, updated, status, finish_reason, raw_finish_reason,
        last_seq, usage, error, upstream_requests, provider_id, credential_hash, token_hash,
        media_type, request_path, response_headers, idempotency_hash, request_hash,
        background,
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
        idempotency_hash=idempotency_hash,
        request_hash=request_hash,
        background=bool(background),
    )
    state = StreamState(
        status=Status(status),
        updated=updated,
        last_seq=max(last_seq, frames_last_seq or 0),
        finish_reason=finish_reason,
        raw_finish_reason=raw_finish_reason,
        usage=loads(usage),
        error=loads(error),
        upstream_requests=upstream_requests,
        provider_id=provider_id,
    )
    return StreamRecord(meta=meta, state=state, text=text)
