"""Producer leases, idempotency lookups and reopening in every journal, the SQLite upgrade from
schema 1, and ``Recovery``: a stream whose lease expired is marked interrupted exactly once."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from unbroken.finish import END_STATES, Status
from unbroken.proxy.producer_lost import reattachable, recovered_end
from unbroken.streams.journal import (
    FrameRecord,
    Journal,
    Lease,
    SQLiteJournal,
    StreamMeta,
    StreamState,
)
from unbroken.streams.journal.sqlite_schema import SCHEMA_VERSION
from unbroken.streams.lease import REATTACHABLE, LeaseKeeper, Recovery


def _meta(stream_id: str, *, dialect: str = "anthropic", background: bool = False,
          key: str | None = None, created: float = 1.0) -> StreamMeta:
    return StreamMeta(stream_id=stream_id, dialect=dialect, created=created,
                      media_type="text/event-stream", token_hash="t", credential_hash="c",
                      idempotency_hash=key, request_hash=None if key is None else "r",
                      background=background)


async def _live(journal: Journal, stream_id: str, lease: Lease | None, **meta: object) -> None:
    await journal.create(_meta(stream_id, **meta),  # type: ignore[arg-type]
                         StreamState(status=Status.PENDING, updated=time.time()), lease)
    await journal.append(stream_id, [FrameRecord(1, None, b'{"a":1}', "a"),
                                     FrameRecord(2, None, b'{"b":2}', "b")],
                         StreamState(status=Status.STREAMING, updated=time.time(), last_seq=2))


@pytest.mark.anyio
async def test_leases_are_set_renewed_for_live_streams_only(journal: Journal) -> None:
    await _live(journal, "s1", Lease("me", 10.0))
    await _live(journal, "s2", Lease("me", 10.0))
    await _live(journal, "s3", Lease("other", 10.0))
    await journal.append("s2", [], StreamState(status=Status.COMPLETED, updated=time.time(),
                                               last_seq=2))
    assert await journal.renew_leases("me", 99.0) == 1
    assert await journal.lease("s1") == Lease("me", 99.0)
    assert await journal.lease("s2") == Lease("me", 10.0)
    assert await journal.lease("s3") == Lease("other", 10.0)
    await journal.set_lease("s3", Lease("me", 50.0))
    assert await journal.lease("s3") == Lease("me", 50.0)
    assert await journal.lease("nope") is None


def test_the_live_statuses_are_those_the_lease_index_names() -> None:
    # SQLiteJournal.renew_leases and its partial index spell them out.
    assert {status.value for status in Status if status not in END_STATES} == {
        "pending", "streaming"}


@pytest.mark.anyio
async def test_find_idempotent_gives_the_newest_stream_of_a_key(journal: Journal) -> None:
    await _live(journal, "old", None, key="k1", created=1.0)
    await _live(journal, "new", None, key="k1", created=2.0)
    await _live(journal, "other", None, key="k2")
    found = await journal.find_idempotent("k1")
    assert found is not None
    assert (found.meta.stream_id, found.meta.request_hash, found.state.last_seq) == (
        "new", "r", 2)
    assert await journal.find_idempotent("k3") is None


@pytest.mark.anyio
async def test_recovery_interrupts_an_expired_lease_once_with_an_error_frame(
    journal: Journal,
) -> None:
    await _live(journal, "dead", Lease("gone", time.time() - 1))
    await _live(journal, "alive", Lease("elsewhere", time.time() + 60))
    journal.release("dead")  # no producer in this process
    journal.release("alive")
    recovery = Recovery(journal, LeaseKeeper(journal, ttl=5, renew_every=1), recovered_end)
    assert await recovery.startup() == 1
    recovery.close()
    record = await journal.get("dead")
    assert record is not None
    assert (record.state.status, record.state.last_seq, record.text) == (
        Status.INTERRUPTED, 3, "ab")
    assert record.state.error is not None and record.state.error["type"] == REATTACHABLE
    [last] = await journal.read_after("dead", 2, 10)
    assert (last.seq, last.event) == (3, "error")
    assert not reattachable(record)  # not a background stream
    again = await recovery.settle("dead")
    assert again is not None and again.state.last_seq == 3  # settled once only
    alive = await recovery.settle("alive")
    assert alive is not None and alive.state.status is Status.STREAMING


@pytest.mark.anyio
async def test_a_stream_this_process_leases_without_a_producer_is_settled_at_once(
    journal: Journal,
) -> None:
    keeper = LeaseKeeper(journal, ttl=60, renew_every=1)
    await _live(journal, "orphan", keeper.lease())  # its producer stopped without its end
    recovery = Recovery(journal, keeper, recovered_end)
    assert (await recovery.settle("orphan")).state.status is Status.STREAMING  # type: ignore[union-attr]
    journal.release("orphan")
    settled = await recovery.settle("orphan", wait=True)  # no wait: the lease is ours
    assert settled is not None
    assert (settled.state.status, settled.state.last_seq) == (Status.INTERRUPTED, 3)


@pytest.mark.anyio
async def test_a_background_stream_is_left_continuable_and_can_reopen(journal: Journal) -> None:
    await _live(journal, "bg", Lease("gone", time.time() - 1), dialect="openai-responses",
                background=True)
    await journal.append("bg", [], StreamState(status=Status.STREAMING, updated=time.time(),
                                               last_seq=2, provider_id="resp_1"))
    journal.release("bg")
    recovery = Recovery(journal, LeaseKeeper(journal, ttl=5, renew_every=1), recovered_end)
    settled = await recovery.settle("bg")
    assert settled is not None and reattachable(settled)
    assert await journal.read_after("bg", 2, 10) == []  # no error frame: it goes on
    tail = await journal.reopen("bg", StreamState(status=Status.STREAMING,
                                                  updated=time.time(), last_seq=2),
                                Lease("me", time.time() + 5))
    assert tail.last_seq == 2 and tail.after(0) is None  # older frames come from storage
    taken = await journal.lease("bg")
    assert taken is not None and taken.owner == "me"
    assert taken.expires == pytest.approx(time.time() + 5, abs=2)
    with pytest.raises(ValueError, match="live already"):
        await journal.reopen("bg", StreamState(status=Status.STREAMING, updated=0, last_seq=2),
                             Lease("me", 0))
    await journal.append("bg", [FrameRecord(3, None, b"{}", "c")],
                         StreamState(status=Status.COMPLETED, updated=time.time(), last_seq=3))
    record = await journal.get("bg")
    assert record is not None and (record.state.status, record.text) == (Status.COMPLETED, "abc")


_SCHEMA_1 = """
CREATE TABLE streams (stream_id TEXT PRIMARY KEY, dialect TEXT NOT NULL, created REAL NOT NULL,
 updated REAL NOT NULL, status TEXT NOT NULL, finish_reason TEXT, raw_finish_reason TEXT,
 last_seq INTEGER NOT NULL, usage TEXT, error TEXT, upstream_requests INTEGER NOT NULL,
 provider_id TEXT, credential_hash TEXT, token_hash TEXT NOT NULL, media_type TEXT NOT NULL,
 request_path TEXT NOT NULL, response_headers TEXT NOT NULL);
CREATE TABLE frames (stream_id TEXT NOT NULL, seq INTEGER NOT NULL, event TEXT,
 data BLOB NOT NULL, text TEXT, PRIMARY KEY (stream_id, seq)) WITHOUT ROWID;
INSERT INTO streams VALUES ('s', 'anthropic', 1, 2, 'completed', 'stop', 'end_turn', 1, NULL,
 NULL, 1, NULL, 'c', 't', 'text/event-stream', '/v1/messages', '[]');
INSERT INTO frames VALUES ('s', 1, NULL, X'7B7D', 'hi');
PRAGMA user_version = 1;
"""


@pytest.mark.anyio
async def test_a_schema_1_file_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    conn = sqlite3.connect(path)
    conn.executescript(_SCHEMA_1)
    conn.close()
    journal = SQLiteJournal(str(path))
    await journal.open()
    try:
        record = await journal.get("s")
        assert record is not None
        assert (record.state.status, record.text, record.meta.background) == (
            Status.COMPLETED, "hi", False)
        assert await journal.lease("s") is None
        assert await journal.find_idempotent("k") is None
    finally:
        await journal.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    conn.close()


_SCHEMA_2_FRAMES = """
CREATE TABLE frames (stream_id TEXT NOT NULL, seq INTEGER NOT NULL, event TEXT,
 data BLOB NOT NULL, text TEXT, PRIMARY KEY (stream_id, seq)) WITHOUT ROWID;
INSERT INTO frames VALUES ('s', 2, 'delta', X'7B2262223A317D', ' there');
INSERT INTO frames VALUES ('s', 1, NULL, X'7B7D', 'hi');
INSERT INTO frames VALUES ('t', 1, NULL, X'5B5D', NULL);
"""


def _schema_2_file(path: Path) -> None:
    """A version 2 file: the version 1 streams table upgraded, frames clustered by stream."""
    conn = sqlite3.connect(path)
    conn.executescript(_SCHEMA_1.replace("PRAGMA user_version = 1;", "")
                       .replace("CREATE TABLE frames", "CREATE TABLE old_frames")
                       .replace("INSERT INTO frames", "INSERT INTO old_frames"))
    conn.executescript("DROP TABLE old_frames;" + _SCHEMA_2_FRAMES)
    for statement in (
        "ALTER TABLE streams ADD COLUMN idempotency_hash TEXT",
        "ALTER TABLE streams ADD COLUMN request_hash TEXT",
        "ALTER TABLE streams ADD COLUMN background INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE streams ADD COLUMN lease_owner TEXT",
        "ALTER TABLE streams ADD COLUMN lease_expires REAL",
        "PRAGMA user_version = 2",
    ):
        conn.execute(statement)
    conn.commit()
    conn.close()


@pytest.mark.anyio
async def test_a_schema_2_file_keeps_its_frames_in_the_version_3_layout(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    _schema_2_file(path)
    journal = SQLiteJournal(str(path))
    await journal.open()
    try:
        record = await journal.get("s")
        assert record is not None
        assert (record.state.status, record.state.last_seq, record.text) == (
            Status.COMPLETED, 2, "hi there")
        assert await journal.read_after("s", 0, 10) == [
            FrameRecord(1, None, b"{}", "hi"), FrameRecord(2, "delta", b'{"b":1}', " there")]
        assert await journal.read_after("t", 0, 10) == [FrameRecord(1, None, b"[]", "")]
    finally:
        await journal.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    assert "frames_v2" not in tables and "frames_by_stream" in tables
    # Arrival order of the copy: by stream, then seq.
    assert conn.execute("SELECT stream_id, seq FROM frames ORDER BY id").fetchall() == [
        ("s", 1), ("s", 2), ("t", 1)]
    conn.close()


@pytest.mark.anyio
async def test_an_upgrade_that_fails_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "v2-blocked.db"
    _schema_2_file(path)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE frames_v2 (x)")  # the upgrade's rename target is taken
    conn.commit()
    conn.close()
    journal = SQLiteJournal(str(path))
    with pytest.raises(sqlite3.OperationalError, match="frames_v2"):
        await journal.open()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (2,)
    assert conn.execute("SELECT count(*) FROM frames").fetchone() == (3,)
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    assert "frames_by_stream" not in tables and "tombstones" not in tables
    conn.close()
