"""Receive times of journaled frames (``FrameRecord.at``) in every journal: memory, a real
SQLite file (with the upgrade of a schema 3 file) and a real redis-server."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import redis.asyncio
import redis.exceptions

from unbroken.finish import Status
from unbroken.proxy.wire import error_frame
from unbroken.resumption import ProxyMark
from unbroken.streams.journal import (
    FrameRecord,
    Journal,
    RedisJournal,
    SQLiteJournal,
    StreamMeta,
    StreamState,
)
from unbroken.streams.journal.sqlite_schema import SCHEMA_VERSION

pytestmark = pytest.mark.anyio

T0 = 1_718_000_000.0


def meta(stream_id: str = "s1") -> StreamMeta:
    return StreamMeta(stream_id=stream_id, dialect="openai-chat", created=T0,
                      media_type="text/event-stream", token_hash="t" * 64,
                      request_path="/v1/chat/completions")


def streaming(last_seq: int) -> StreamState:
    return StreamState(status=Status.STREAMING, updated=T0, last_seq=last_seq)


def timed(first: int, last: int) -> list[FrameRecord]:
    """Frames with receive times that only round-trip exactly if stored exactly."""
    return [FrameRecord(seq, None, b'{"n":%d}' % seq, f"<{seq}>", T0 + seq * 0.123457 + 1e-6)
            for seq in range(first, last + 1)]


async def test_receive_times_round_trip_exactly(journal: Journal) -> None:
    await journal.create(meta(), streaming(0))
    untimed = FrameRecord(4, "ping", b"{}")
    await journal.append("s1", [*timed(1, 3), untimed], streaming(4))
    await journal.append("s1", timed(5, 9), streaming(9))  # more than the tail cache holds
    stored = await journal.read_after("s1", 0, 100)
    assert [frame.at for frame in stored] == [
        T0 + 0.123457 + 1e-6, T0 + 2 * 0.123457 + 1e-6, T0 + 3 * 0.123457 + 1e-6, 0.0,
        *(T0 + seq * 0.123457 + 1e-6 for seq in range(5, 10))]
    assert stored == [*timed(1, 3), untimed, *timed(5, 9)]
    # Readers get them too, from storage and from the live tail.
    reader = journal.follow("s1", 2)
    assert await anext(reader) == stored[2:]
    await journal.append("s1", timed(10, 10), StreamState(status=Status.COMPLETED,
                                                          updated=T0, last_seq=10))
    assert [frame async for batch in reader for frame in batch] == timed(10, 10)


async def test_a_proxy_error_frame_carries_the_time_it_was_made(journal: Journal) -> None:
    import time

    before = time.time()
    frame = error_frame("anthropic", 1, ended_mark("upstream_interrupted", "broke"))
    after = time.time()
    assert before <= frame.at <= after
    await journal.create(meta(), streaming(0))
    await journal.append("s1", [frame], StreamState(status=Status.INTERRUPTED, updated=after,
                                                     last_seq=1))
    assert await journal.read_after("s1", 0, 10) == [frame]


# -- SQLite: a schema 3 file -------------------------------------------------------------------

# The version 3 DDL and rows as a proxy of that version wrote them (no receive times).
_SCHEMA_3 = """
CREATE TABLE streams (
    stream_id TEXT PRIMARY KEY, dialect TEXT NOT NULL, created REAL NOT NULL,
    updated REAL NOT NULL, status TEXT NOT NULL, finish_reason TEXT, raw_finish_reason TEXT,
    last_seq INTEGER NOT NULL, usage TEXT, error TEXT, upstream_requests INTEGER NOT NULL,
    provider_id TEXT, credential_hash TEXT, token_hash TEXT NOT NULL, media_type TEXT NOT NULL,
    request_path TEXT NOT NULL, response_headers TEXT NOT NULL, idempotency_hash TEXT,
    request_hash TEXT, background INTEGER NOT NULL DEFAULT 0, lease_owner TEXT,
    lease_expires REAL
);
CREATE INDEX streams_updated ON streams (updated);
CREATE TABLE frames (
    id INTEGER PRIMARY KEY, stream_id TEXT NOT NULL, seq INTEGER NOT NULL, event TEXT,
    data BLOB NOT NULL, text TEXT
);
CREATE UNIQUE INDEX frames_by_stream ON frames (stream_id, seq);
CREATE INDEX streams_idempotency ON streams (idempotency_hash)
    WHERE idempotency_hash IS NOT NULL;
CREATE INDEX streams_live_leases ON streams (lease_owner)
    WHERE status IN ('pending', 'streaming');
CREATE TABLE tombstones (
    stream_id TEXT PRIMARY KEY, token_hash TEXT NOT NULL, credential_hash TEXT,
    expired_at REAL NOT NULL
) WITHOUT ROWID;
INSERT INTO streams VALUES ('s1', 'openai-chat', 1718000000.0, 1718000001.0, 'streaming',
    NULL, NULL, 2, NULL, NULL, 1, NULL, NULL, 'tttt', 'text/event-stream',
    '/v1/chat/completions', '[]', NULL, NULL, 0, NULL, NULL);
INSERT INTO frames (stream_id, seq, event, data, text) VALUES ('s1', 1, NULL, X'7B7D', 'hi');
INSERT INTO frames (stream_id, seq, event, data, text) VALUES ('s1', 2, 'delta', X'5B5D', NULL);
PRAGMA user_version = 3;
"""


def _schema_3_file(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(_SCHEMA_3)
    conn.close()


async def test_a_schema_3_file_is_upgraded_and_its_old_frames_have_no_time(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v3.db"
    _schema_3_file(path)
    journal = SQLiteJournal(str(path))
    await journal.open()
    try:
        assert await journal.read_after("s1", 0, 10) == [
            FrameRecord(1, None, b"{}", "hi", 0.0), FrameRecord(2, "delta", b"[]", "", 0.0)]
        # The stream goes on after the upgrade: its new frames keep their times.
        await journal.append("s1", timed(3, 4), streaming(4))
        assert [frame.at for frame in await journal.read_after("s1", 0, 10)] == [
            0.0, 0.0, T0 + 3 * 0.123457 + 1e-6, T0 + 4 * 0.123457 + 1e-6]
        record = await journal.get("s1")
        assert record is not None and (record.text, record.state.last_seq) == ("hi<3><4>", 4)
    finally:
        await journal.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,) == (6,)
    assert [row[1] for row in conn.execute("PRAGMA table_info(frames)")] == [
        "id", "stream_id", "seq", "event", "data", "text", "at"]
    assert conn.execute("SELECT seq, at FROM frames ORDER BY id").fetchall() == [
        (1, None), (2, None), (3, T0 + 3 * 0.123457 + 1e-6), (4, T0 + 4 * 0.123457 + 1e-6)]
    conn.close()


async def test_a_failed_upgrade_leaves_the_schema_3_file_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    _schema_3_file(path)
    conn = sqlite3.connect(path)
    # A column the upgrade's ALTER TABLE cannot add again: the step fails, nothing lands.
    conn.execute("CREATE TABLE blocker (x)")
    conn.execute("ALTER TABLE frames ADD COLUMN at TEXT")
    conn.execute("DROP TABLE blocker")
    conn.commit()
    conn.close()
    with pytest.raises(sqlite3.OperationalError, match="duplicate column name: at"):
        await SQLiteJournal(str(path)).open()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (3,)
    assert conn.execute("SELECT COUNT(*) FROM frames").fetchone() == (2,)
    conn.close()


# -- Redis: entries without a time, and resends ------------------------------------------------

async def test_a_redis_entry_without_a_time_reads_back_unknown(redis_url: str) -> None:
    journal = RedisJournal(redis_url)
    await journal.open()
    try:
        await journal.create(meta(), streaming(0))
        # An entry as the journal wrote frames before receive times were kept.
        client = redis.asyncio.Redis.from_url(redis_url)
        await client.xadd("unbroken:{s1}:f", {"d": b"{}", "t": b"hi"}, id="0-1")
        await client.hset("unbroken:{s1}:s", "top", 1)
        await client.aclose()
        await journal.append("s1", timed(2, 2), streaming(2))
        assert await journal.read_after("s1", 0, 10) == [
            FrameRecord(1, None, b"{}", "hi", 0.0), *timed(2, 2)]
    finally:
        await journal.close()


async def test_a_resend_with_the_same_times_is_taken_once_and_other_times_conflict(
    redis_url: str,
) -> None:
    journal = RedisJournal(redis_url)
    await journal.open()
    try:
        await journal.create(meta(), streaming(0))
        untimed = FrameRecord(3, None, b"{}", "x")
        batch = [("s1", [*timed(1, 2), untimed], streaming(3), None)]
        assert await journal._commit(batch) == [3]
        # redis-py resends a command whose reply a dropped connection lost: the same bytes,
        # receive times included, are a no-op.
        assert await journal._commit(batch) == [3]
        assert await journal.read_after("s1", 0, 10) == [*timed(1, 2), untimed]
        # The same data with another receive time is not a resend: it is refused.
        moved = timed(2, 2)[0]._replace(at=T0 + 99.0)
        (refused,) = await journal._commit([("s1", [moved], streaming(3), None)])
        assert isinstance(refused, redis.exceptions.ResponseError)
        assert str(refused) == "BADSEQ stream s1: seq 2 is stored already, with other data"
        # A time where none was stored is another frame too.
        (refused,) = await journal._commit(
            [("s1", [untimed._replace(at=T0)], streaming(3), None)])
        assert isinstance(refused, redis.exceptions.ResponseError)
        record = await journal.get("s1")
        assert record is not None and (record.state.last_seq, record.text) == (3, "<1><2>x")
    finally:
        await journal.close()


def ended_mark(code: str, message: str) -> ProxyMark:
    """The mark of a frame the proxy journaled to end a stream."""
    status = "cancelled" if code == "stream_cancelled" else "interrupted"
    return ProxyMark(code=code, status=status, resumable=False, message=message)
