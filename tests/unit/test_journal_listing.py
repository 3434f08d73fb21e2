"""``Journal.list_streams`` on every journal: memory, a real SQLite file, a real redis-server.

Then what is particular to each: SQLite's indexes (the query plans walk them, no sort), the
schema 4 -> 5 upgrade, the read-only opening of ``unbroken streams``; Redis's creation-time
indexes (kept by ``CREATE`` and ``PURGE``) and what a Redis written by an older proxy lists.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from unbroken.finish import Status
from unbroken.streams.journal import (
    MAX_PAGE,
    Journal,
    RedisJournal,
    SQLiteJournal,
    StreamMeta,
    StreamPage,
    StreamState,
)
from unbroken.streams.journal.listing import stream_query
from unbroken.streams.journal.sqlite_schema import SCHEMA_VERSION, listing_select

pytestmark = pytest.mark.anyio

CRED_A = "a" * 64
CRED_B = "b" * 64


def meta(stream_id: str, created: float, cred: str | None = CRED_A) -> StreamMeta:
    return StreamMeta(stream_id=stream_id, dialect="openai-chat", created=created,
                      media_type="text/event-stream", token_hash="t" * 64,
                      credential_hash=cred, request_path="/v1/chat/completions")


def state(status: Status, updated: float, **fields: Any) -> StreamState:
    return StreamState(status=status, updated=updated, **fields)


async def make(journal: Journal, stream_id: str, created: float, status: Status = Status.COMPLETED,
               cred: str | None = CRED_A, **fields: Any) -> None:
    await journal.create(meta(stream_id, created, cred), state(Status.STREAMING, created))
    if status is not Status.STREAMING:
        await journal.set_status(stream_id, state(status, created + 1.0, **fields))


def ids(page: StreamPage) -> list[str]:
    return [record.meta.stream_id for record in page.streams]


async def every_page(journal: Journal, **filters: Any) -> list[list[str]]:
    pages: list[list[str]] = []
    cursor = None
    for _ in range(100):
        page = await journal.list_streams(cursor=cursor, **filters)
        pages.append(ids(page))
        cursor = page.next_cursor
        if cursor is None:
            return pages
    raise AssertionError("the listing never ended")


async def five(journal: Journal) -> None:
    await make(journal, "s1", 100.0, Status.COMPLETED, finish_reason="stop")
    await make(journal, "s2", 200.0, Status.INTERRUPTED,
               error={"type": "TransportError", "message": "peer closed"})
    await make(journal, "s3", 300.0, Status.FAILED, cred=CRED_B,
               error={"type": "overloaded_error", "message": "busy", "retryable": True})
    await make(journal, "s4", 400.0, Status.STREAMING, cred=None)
    await make(journal, "s5", 500.0, Status.INTERRUPTED, cred=CRED_B)


# -- the contract ------------------------------------------------------------------------------

async def test_newest_first_with_meta_and_state_and_no_text(journal: Journal) -> None:
    await five(journal)
    page = await journal.list_streams()
    assert ids(page) == ["s5", "s4", "s3", "s2", "s1"]
    assert page.next_cursor is None
    s3 = page.streams[2]
    assert s3.meta == meta("s3", 300.0, CRED_B)
    assert s3.state == state(Status.FAILED, 301.0, error={
        "type": "overloaded_error", "message": "busy", "retryable": True})
    assert [record.text for record in page.streams] == [""] * 5


async def test_a_live_streams_last_seq_comes_from_its_frames(journal: Journal) -> None:
    from unbroken.streams.journal import FrameRecord

    await journal.create(meta("live", 10.0), state(Status.STREAMING, 10.0))
    # Progress alone within a second: the stored state is not rewritten, the frames tell.
    await journal.append("live", [FrameRecord(n, None, b"{}", "x") for n in (1, 2, 3)],
                         state(Status.STREAMING, 10.2, last_seq=3))
    (listed,) = (await journal.list_streams()).streams
    assert (listed.state.status, listed.state.last_seq, listed.text) == (Status.STREAMING, 3, "")


async def test_filters(journal: Journal) -> None:
    await five(journal)
    assert ids(await journal.list_streams(status=Status.INTERRUPTED)) == ["s5", "s2"]
    assert ids(await journal.list_streams(status=[Status.INTERRUPTED, Status.FAILED])) == [
        "s5", "s3", "s2"]
    assert ids(await journal.list_streams(status={Status.CANCELLED})) == []
    # since inclusive, until exclusive
    assert ids(await journal.list_streams(since=200.0, until=400.0)) == ["s3", "s2"]
    assert ids(await journal.list_streams(since=200.0001)) == ["s5", "s4", "s3"]
    assert ids(await journal.list_streams(until=100.0)) == []
    assert ids(await journal.list_streams(credential_hash=CRED_B)) == ["s5", "s3"]
    assert ids(await journal.list_streams(credential_hash=CRED_A)) == ["s2", "s1"]
    assert ids(await journal.list_streams(credential_hash="c" * 64)) == []
    assert ids(await journal.list_streams(credential_hash=CRED_B, status=Status.FAILED,
                                          since=250.0, until=350.0)) == ["s3"]


async def test_pages_follow_each_other_to_the_end(journal: Journal) -> None:
    await five(journal)
    assert await every_page(journal, limit=2) == [["s5", "s4"], ["s3", "s2"], ["s1"]]
    assert await every_page(journal, limit=5) == [["s5", "s4", "s3", "s2", "s1"]]
    # A full last page: the next one is known to be empty only once read.
    assert await every_page(journal, limit=1, credential_hash=CRED_B) == [["s5"], ["s3"]]
    assert await every_page(journal, limit=1, status=Status.INTERRUPTED) == [["s5"], ["s2"]]


async def test_pages_are_stable_under_inserts_and_purges(journal: Journal) -> None:
    await five(journal)
    first = await journal.list_streams(limit=2)
    assert ids(first) == ["s5", "s4"]
    # New streams (newer than the cursor) arrive; one page-1 stream and one later one leave.
    await make(journal, "s6", 600.0)
    await make(journal, "s7", 700.0)
    await journal.set_status("s4", state(Status.COMPLETED, 1000.0))
    second = await journal.list_streams(limit=2, cursor=first.next_cursor)
    assert ids(second) == ["s3", "s2"]
    await make(journal, "s8", 800.0)
    # s1 purged (not updated since 150); s5, s4 and the new ones stay
    assert await journal.expire(150.0) == 1
    third = await journal.list_streams(limit=2, cursor=second.next_cursor)
    assert (ids(third), third.next_cursor) == ([], None)
    assert await every_page(journal, limit=3) == [["s8", "s7", "s6"], ["s5", "s4", "s3"],
                                                  ["s2"]]


async def test_equal_creation_times_are_ordered_by_id_across_pages(journal: Journal) -> None:
    for name in ("e1", "e2", "e3", "e4", "e5"):
        await make(journal, name, 50.0)
    await make(journal, "later", 51.0)
    assert await every_page(journal, limit=2) == [["later", "e5"], ["e4", "e3"], ["e2", "e1"]]
    assert await every_page(journal, limit=1, since=50.0, until=51.0) == [
        ["e5"], ["e4"], ["e3"], ["e2"], ["e1"]]


async def test_purged_streams_are_not_listed(journal: Journal) -> None:
    await five(journal)
    assert await journal.expire(450.0) == 3  # s1-s3; s4 is live here, never purged
    assert ids(await journal.list_streams()) == ["s5", "s4"]
    assert ids(await journal.list_streams(credential_hash=CRED_A)) == []
    assert ids(await journal.list_streams(status=Status.FAILED)) == []
    assert await journal.tombstone("s3") is not None  # a tombstone is not a stream


async def test_a_live_stream_is_never_purged_and_stays_listed(journal: Journal) -> None:
    await journal.create(meta("live", 10.0), state(Status.STREAMING, 10.0))
    assert await journal.expire(1e12) == 0
    assert ids(await journal.list_streams()) == ["live"]


async def test_a_status_filter_reads_past_many_other_streams(journal: Journal) -> None:
    # More than one Redis read batch of non-matching streams, some at one creation time.
    for n in range(300):
        await make(journal, f"ok{n:03d}", 1000.0 if n < 280 else 1000.0 + n,
                   Status.COMPLETED)
    await make(journal, "bad1", 999.0, Status.FAILED)
    await make(journal, "bad2", 998.0, Status.FAILED)
    await make(journal, "bad3", 1000.0, Status.FAILED)  # amid 280 streams created at 1000.0
    assert await every_page(journal, status=Status.FAILED, limit=2) == [
        ["bad3", "bad1"], ["bad2"]]
    page = await journal.list_streams(limit=MAX_PAGE)
    assert len(page.streams) == 303 and page.next_cursor is None
    assert ids(page)[:2] == ["ok299", "ok298"] and ids(page)[-4:] == [
        "ok000", "bad3", "bad1", "bad2"]


async def test_bad_arguments_are_refused(journal: Journal) -> None:
    for limit in (0, MAX_PAGE + 1, -1):
        with pytest.raises(ValueError, match=f"limit must be 1 to 1000, not {limit}"):
            await journal.list_streams(limit=limit)
    with pytest.raises(ValueError, match="limit must be 1 to 1000, not True"):
        await journal.list_streams(limit=True)
    for cursor in ("", "%%%", "bm90IGEgY3Vyc29y", "aW5mIHMx"):  # "not a cursor", "inf s1"
        with pytest.raises(ValueError, match="not a cursor of this listing"):
            await journal.list_streams(cursor=cursor)
    with pytest.raises(ValueError, match="since must be a finite time"):
        await journal.list_streams(since=float("nan"))
    with pytest.raises(ValueError, match="'paused' is not a valid Status"):
        await journal.list_streams(status=["paused"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="status names no status"):
        await journal.list_streams(status=[])
    assert (await journal.list_streams(limit=MAX_PAGE)).streams == ()


def test_a_cursor_names_a_position_not_a_stream() -> None:
    query = stream_query(cursor=stream_query_cursor(123.25, "ub_x"))
    assert query.before == (123.25, "ub_x")


def stream_query_cursor(created: float, stream_id: str) -> str:
    from unbroken.streams.journal.listing import _cursor

    return _cursor((created, stream_id))


# -- SQLite ------------------------------------------------------------------------------------

def _plan(conn: sqlite3.Connection, **filters: Any) -> str:
    sql, params = listing_select(stream_query(**filters))
    rows = conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
    return " | ".join(row[-1] for row in rows)


async def test_sqlite_pages_walk_an_index_without_sorting(tmp_path: Path) -> None:
    journal = SQLiteJournal(str(tmp_path / "j.db"))
    await journal.open()
    await journal.close()
    conn = sqlite3.connect(tmp_path / "j.db")
    cursor = stream_query_cursor(5.0, "ub_x")
    by_time = "SCAN streams USING INDEX streams_created"
    assert _plan(conn).startswith(by_time)
    assert _plan(conn, since=1.0, until=2.0).startswith(
        "SEARCH streams USING INDEX streams_created (created>? AND created<?)")
    assert _plan(conn, status=[Status.FAILED, Status.INTERRUPTED], cursor=cursor).startswith(
        "SEARCH streams USING INDEX streams_created ((created,stream_id)<(?,?))")
    assert _plan(conn, credential_hash=CRED_A, cursor=cursor).startswith(
        "SEARCH streams USING INDEX streams_by_credential (credential_hash=? AND "
        "(created,stream_id)<(?,?))")
    for filters in ({}, {"credential_hash": CRED_A, "status": Status.FAILED, "since": 1.0}):
        plan = _plan(conn, **filters)
        assert "TEMP B-TREE" not in plan
        assert "SEARCH frames USING COVERING INDEX frames_by_stream (stream_id=?)" in plan
    conn.close()


_SCHEMA_4 = """
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
    data BLOB NOT NULL, text TEXT, at REAL
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
INSERT INTO streams VALUES ('old1', 'anthropic', 1718000000.0, 1718000002.0, 'interrupted',
    NULL, NULL, 1, NULL, '{"type":"TransportError","message":"cut"}', 2, NULL, 'cred',
    'tttt', 'text/event-stream', '/v1/messages', '[]', NULL, NULL, 0, NULL, NULL);
INSERT INTO streams VALUES ('old2', 'openai-chat', 1718000100.0, 1718000101.0, 'streaming',
    NULL, NULL, 0, NULL, NULL, 1, NULL, NULL, 'tttt', 'text/event-stream',
    '/v1/chat/completions', '[]', NULL, NULL, 0, NULL, NULL);
INSERT INTO frames (stream_id, seq, event, data, text, at)
    VALUES ('old2', 1, NULL, X'7B7D', 'hi', 1718000100.5);
INSERT INTO frames (stream_id, seq, event, data, text, at)
    VALUES ('old2', 2, NULL, X'7B7D', NULL, 1718000100.7);
PRAGMA user_version = 4;
"""


def _schema_4_file(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(_SCHEMA_4)
    conn.close()


def _indexes(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {name for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'streams_%'")}
    finally:
        conn.close()


async def test_a_schema_4_file_is_upgraded_and_its_streams_listed(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    _schema_4_file(path)
    assert "streams_created" not in _indexes(path)
    journal = SQLiteJournal(str(path))
    await journal.open()
    try:
        page = await journal.list_streams()
        assert ids(page) == ["old2", "old1"]
        assert [(r.state.status, r.state.last_seq, r.state.upstream_requests, r.state.error)
                for r in page.streams] == [
            (Status.STREAMING, 2, 1, None),
            (Status.INTERRUPTED, 1, 2, {"type": "TransportError", "message": "cut"})]
        assert ids(await journal.list_streams(credential_hash="cred")) == ["old1"]
        await make(journal, "new", 1718000200.0)
        assert ids(await journal.list_streams(limit=1)) == ["new"]
    finally:
        await journal.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,) == (6,)
    conn.close()
    assert _indexes(path) == {"streams_updated", "streams_idempotency", "streams_live_leases",
                              "streams_created", "streams_by_credential"}


async def test_read_only_opening_lists_without_touching_the_file(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    _schema_4_file(path)
    reader = SQLiteJournal(str(path), read_only=True)
    await reader.open()
    try:
        assert ids(await reader.list_streams(status=Status.INTERRUPTED)) == ["old1"]
        record = await reader.get("old2")
        assert record is not None and (record.text, record.state.last_seq) == ("hi", 2)
        with pytest.raises(RuntimeError, match="the journal is read-only"):
            await make(reader, "new", 1.0)
    finally:
        await reader.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (4,)  # not upgraded
    assert conn.execute("SELECT COUNT(*) FROM streams").fetchone() == (2,)
    conn.close()
    assert "streams_created" not in _indexes(path)


async def test_read_only_opening_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such journal file"):
        await SQLiteJournal(str(tmp_path / "none.db"), read_only=True).open()
    assert not (tmp_path / "none.db").exists()
    for version, why in ((3, r"journal schema 3, this version reads 4 to 6 \(start this "
                                r"version's proxy on it once to upgrade it\)"),
                         (7, r"journal schema 7, this version reads 4 to 6$"),
                         (0, r"journal schema 0, this version reads 4 to 6$")):
        path = tmp_path / f"v{version}.db"
        conn = sqlite3.connect(path)
        conn.execute(f"PRAGMA user_version = {version}")
        conn.close()
        with pytest.raises(RuntimeError, match=why):
            await SQLiteJournal(str(path), read_only=True).open()


# -- Redis -------------------------------------------------------------------------------------

def _raw(url: str) -> Any:
    import redis.asyncio

    return redis.asyncio.Redis.from_url(url)


async def test_redis_indexes_are_kept_by_create_and_purge(redis_url: str) -> None:
    journal = RedisJournal(redis_url + "?prefix=ix:")
    await journal.open()
    raw = _raw(redis_url)
    try:
        await make(journal, "a1", 10.0)
        await make(journal, "b1", 20.0, cred=CRED_B)
        await make(journal, "n1", 30.0, cred=None)
        assert await raw.zrange("ix:created", 0, -1, withscores=True) == [
            (b"a1", 10.0), (b"b1", 20.0), (b"n1", 30.0)]
        assert await raw.zrange(f"ix:created:{CRED_A}", 0, -1) == [b"a1"]
        assert await raw.zrange(f"ix:created:{CRED_B}", 0, -1) == [b"b1"]
        assert await journal.expire(25.0) == 2
        assert await raw.zrange("ix:created", 0, -1) == [b"n1"]
        assert await raw.exists(f"ix:created:{CRED_A}", f"ix:created:{CRED_B}") == 0
    finally:
        await raw.aclose()
        await journal.close()


async def test_an_older_proxys_redis_lists_only_what_the_indexes_hold(redis_url: str) -> None:
    journal = RedisJournal(redis_url + "?prefix=old:")
    await journal.open()
    raw = _raw(redis_url)
    try:
        # A stream an older proxy created (its CREATE kept no creation-time index) ...
        await make(journal, "before", 10.0, Status.INTERRUPTED)
        await raw.zrem("old:created", "before")
        await raw.zrem(f"old:created:{CRED_A}", "before")
        # ... and one it purged (its PURGE left the index entries behind).
        await make(journal, "gone", 15.0)
        await raw.delete("old:{gone}:s")
        await make(journal, "after", 20.0, Status.INTERRUPTED)
        assert ids(await journal.list_streams()) == ["after"]
        assert ids(await journal.list_streams(credential_hash=CRED_A)) == ["after"]
        # The stale entries were dropped as they were met; the old stream is still readable.
        assert await raw.zrange("old:created", 0, -1) == [b"after"]
        assert await raw.zrange(f"old:created:{CRED_A}", 0, -1) == [b"after"]
        before = await journal.get("before", with_text=False)
        assert before is not None and before.state.status is Status.INTERRUPTED
        assert await journal.expire(100.0) == 2  # before, after ("gone" has no hash left)
        assert ids(await journal.list_streams()) == []
    finally:
        await raw.aclose()
        await journal.close()
