"""The journal interface, run against every implementation: memory, a real SQLite file, and a
real redis-server (``RedisJournal``; its multi-process behaviour is in ``test_journal_redis.py``).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from unbroken.finish import Status
from unbroken.streams.journal import (
    FrameRecord,
    Journal,
    MemoryJournal,
    RedisJournal,
    SQLiteJournal,
    StreamMeta,
    StreamState,
    journal_for,
)
from unbroken.streams.journal.sqlite_schema import SCHEMA_VERSION


def meta(stream_id: str = "s1", created: float = 100.0) -> StreamMeta:
    return StreamMeta(
        stream_id=stream_id,
        dialect="openai-chat",
        created=created,
        media_type="text/event-stream",
        token_hash="t" * 64,
        credential_hash="c" * 64,
        request_path="/v1/chat/completions",
        response_headers=(("x-request-id", "req_1"), ("openai-version", "2020-10-01")),
    )


def streaming(last_seq: int, updated: float = 100.0) -> StreamState:
    return StreamState(status=Status.STREAMING, updated=updated, last_seq=last_seq)


def frames(first: int, last: int) -> list[FrameRecord]:
    return [
        FrameRecord(seq, "delta" if seq % 2 else None, f'{{"n":{seq}}}'.encode(), f"<{seq}>")
        for seq in range(first, last + 1)
    ]


async def collect(journal: Journal, stream_id: str, after: int) -> list[FrameRecord]:
    return [frame async for batch in journal.follow(stream_id, after) for frame in batch]


@pytest.mark.anyio
async def test_append_read_get(journal: Journal) -> None:
    await journal.create(meta(), streaming(0))
    await journal.append("s1", frames(1, 3), streaming(3, 101.0))
    await journal.append("s1", frames(4, 5), streaming(5, 102.0))
    assert await journal.read_after("s1", 0, 100) == frames(1, 5)
    assert await journal.read_after("s1", 2, 2) == frames(3, 4)
    assert await journal.read_after("s1", 5, 100) == []
    assert await journal.read_after("unknown", 0, 100) == []
    record = await journal.get("s1")
    assert record is not None
    assert record.meta == meta()
    assert record.text == "<1><2><3><4><5>"
    assert record.state == streaming(5, 102.0)
    assert await journal.get("unknown") is None
    assert await journal.unfinished() == ["s1"]


@pytest.mark.anyio
async def test_final_state_round_trips(journal: Journal) -> None:
    await journal.create(meta(), streaming(0))
    final = StreamState(
        status=Status.TRUNCATED,
        updated=150.5,
        last_seq=2,
        finish_reason="length",
        raw_finish_reason="max_tokens",
        usage={"input_tokens": 12, "output_tokens": 40},
        error={"type": "x", "message": "y"},
        upstream_requests=2,
        provider_id="resp_1",
    )
    await journal.append("s1", frames(1, 2), final)
    record = await journal.get("s1")
    assert record is not None
    assert record.state == final
    assert record.summary() == {
        "id": "s1",
        "dialect": "openai-chat",
        "status": "truncated",
        "finish_reason": "length",
        "raw_finish_reason": "max_tokens",
        "text": "<1><2>",
        "last_seq": 2,
        "usage": {"input_tokens": 12, "output_tokens": 40},
        "usage_missing": None,
        "error": {"type": "x", "message": "y"},
        "created": 100.0,
        "updated": 150.5,
        "upstream_requests": 2,
        "provider_id": "resp_1",
    }
    assert await journal.unfinished() == []
    assert journal.tail("s1") is None


@pytest.mark.parametrize(("status", "missing"), [
    (Status.PENDING, "the upstream has not reported usage yet"),
    (Status.STREAMING, "the upstream has not reported usage yet"),
    (Status.COMPLETED, "the upstream reported no usage"),
    (Status.TRUNCATED, "the upstream reported no usage"),
    (Status.FILTERED, "the upstream reported no usage"),
    (Status.FAILED, "the upstream reported no usage"),
    (Status.CANCELLED, "the stream ended cancelled before the upstream reported usage"),
    (Status.INTERRUPTED, "the stream ended interrupted before the upstream reported usage"),
])
def test_a_state_without_usage_says_why(status: Status, missing: str) -> None:
    state = StreamState(status=status, updated=1.0)
    assert (state.usage, state.usage_missing) == (None, missing)
    counted = StreamState(status=status, updated=1.0, usage={"input_tokens": 0})
    assert counted.usage_missing is None  # zero tokens reported is usage, not its absence


@pytest.mark.anyio
async def test_duplicate_stream_or_seq_is_refused(journal: Journal) -> None:
    await journal.create(meta(), streaming(0))
    with pytest.raises((KeyError, sqlite3.IntegrityError)):
        await journal.create(meta(), streaming(0))
    await journal.append("s1", frames(1, 2), streaming(2))
    with pytest.raises((ValueError, sqlite3.IntegrityError)):
        await journal.append("s1", frames(2, 3), streaming(3))
    assert await journal.read_after("s1", 0, 10) == frames(1, 2)


@pytest.mark.anyio
async def test_follow_serves_stored_then_live_then_ends(journal: Journal) -> None:
    await journal.create(meta(), streaming(0))
    await journal.append("s1", frames(1, 10), streaming(10))  # more than the tail cache holds
    tail = journal.tail("s1")
    assert tail is not None
    reader = asyncio.create_task(collect(journal, "s1", 3))
    for _ in range(5):
        await asyncio.sleep(0)
    assert tail.readers == 1
    for first in range(11, 30, 3):
        await journal.append("s1", frames(first, first + 2), streaming(first + 2))
        await asyncio.sleep(0)
    ended = StreamState(status=Status.COMPLETED, updated=101.0, last_seq=33, finish_reason="stop")
    await journal.append("s1", frames(32, 33), ended)
    got = await asyncio.wait_for(reader, 10)
    assert [f.seq for f in got] == list(range(4, 34))
    assert got == frames(4, 33)
    assert tail.readers == 0
    assert tail.ended
    # A reader after the end gets the stored frames and stops.
    assert await collect(journal, "s1", 30) == frames(31, 33)
    assert await collect(journal, "s1", 33) == []


@pytest.mark.anyio
async def test_slow_reader_falls_back_to_storage(journal: Journal) -> None:
    await journal.create(meta(), streaming(0))
    follower = journal.follow("s1", 0)
    await journal.append("s1", frames(1, 2), streaming(2))
    reads = await follower.__anext__()
    assert reads == frames(1, 2)
    # 20 frames arrive while the reader is stuck on frame 1; the tail keeps only 4 of them.
    for seq in range(3, 23):
        await journal.append("s1", frames(seq, seq), streaming(seq))
    await journal.set_status("s1", StreamState(status=Status.COMPLETED, updated=1, last_seq=22))
    batches = [batch async for batch in follower]
    assert [frame for batch in batches for frame in batch] == frames(3, 22)
    assert batches[0] == frames(3, 22)  # one storage read: the cache lost frames 3 to 18


@pytest.mark.anyio
async def test_follow_yields_none_for_keepalive(journal: Journal) -> None:
    await journal.create(meta(), streaming(0))
    follower = journal.follow("s1", 0, keepalive=0.01)
    assert await follower.__anext__() == []
    await journal.append("s1", frames(1, 1), streaming(1))
    assert await follower.__anext__() == frames(1, 1)
    await journal.set_status("s1", StreamState(status=Status.CANCELLED, updated=1, last_seq=1))
    assert [frame async for frame in follower] == []


@pytest.mark.anyio
async def test_reader_count_callback(journal: Journal) -> None:
    tail = await journal.create(meta(), streaming(0))
    counts: list[int] = []
    tail.on_readers = counts.append
    follower = journal.follow("s1", 0, keepalive=0.01)
    assert await follower.__anext__() == []
    await follower.aclose()
    assert counts == [1, 0]


@pytest.mark.anyio
async def test_expire_keeps_live_and_recent_streams(journal: Journal) -> None:
    await journal.create(meta("old", 10.0), streaming(0, 10.0))
    await journal.append("old", frames(1, 2), StreamState(status=Status.COMPLETED, updated=10.0))
    await journal.create(meta("live", 10.0), streaming(0, 10.0))  # old but still produced here
    await journal.create(meta("new", 10.0), streaming(0, 10.0))
    await journal.set_status("new", StreamState(status=Status.COMPLETED, updated=500.0))
    assert await journal.expire(100.0) == 1
    assert await journal.get("old") is None
    assert await journal.read_after("old", 0, 10) == []
    assert await journal.get("live") is not None
    assert await journal.get("new") is not None
    # A purged stream leaves a tombstone naming who may read it, until a later purge.
    tomb = await journal.tombstone("old")
    assert tomb is not None
    assert (tomb.stream_id, tomb.token_hash) == ("old", meta("old", 10.0).token_hash)
    assert tomb.credential_hash == meta("old", 10.0).credential_hash
    assert await journal.tombstone("new") is None
    assert await journal.expire(100.0) == 0
    assert await journal.tombstone("old") is not None  # kept one more retention period
    assert await journal.expire(time.time() + 60) == 1  # "new" goes; the old tombstone too
    assert await journal.tombstone("old") is None
    assert await journal.tombstone("new") is not None


@pytest.mark.anyio
async def test_sqlite_survives_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "restart.db")
    first = SQLiteJournal(path)
    await first.open()
    await first.create(meta(), streaming(0))
    await first.append("s1", frames(1, 3), StreamState(status=Status.COMPLETED, updated=3.0,
                                                        last_seq=3, finish_reason="stop"))
    await first.close()
    second = SQLiteJournal(path)
    await second.open()
    try:
        record = await second.get("s1")
        assert record is not None
        assert (record.state.status, record.state.last_seq, record.text) == (
            Status.COMPLETED, 3, "<1><2><3>"
        )
        assert await collect(second, "s1", 1) == frames(2, 3)
    finally:
        await second.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    conn.close()


@pytest.mark.anyio
async def test_sqlite_group_commit_folds_concurrent_appends(tmp_path: Path) -> None:
    journal = SQLiteJournal(str(tmp_path / "group.db"))
    await journal.open()
    try:
        for n in range(20):
            await journal.create(meta(f"s{n}"), streaming(0))
        before = journal.commits
        # 20 streams x 10 rounds: each round's 20 appends are made in one turn of the event
        # loop, so each round is one transaction.
        for seq in range(1, 11):
            await asyncio.gather(
                *(journal.append(f"s{n}", frames(seq, seq), streaming(seq)) for n in range(20))
            )
        assert journal.commits - before == 10
        for n in range(20):
            assert await journal.read_after(f"s{n}", 0, 100) == frames(1, 10)
    finally:
        await journal.close()


@pytest.mark.anyio
async def test_release_ends_readers_of_a_stream_without_its_final_append(journal: Journal) -> None:
    await journal.create(meta(), streaming(0))
    await journal.append("s1", frames(1, 2), streaming(2))
    reader = asyncio.create_task(collect(journal, "s1", 0))
    await asyncio.sleep(0)
    journal.release("s1")
    assert await asyncio.wait_for(reader, 10) == frames(1, 2)
    assert journal.tail("s1") is None


def test_journal_for_rejects_unknown_stores() -> None:
    assert isinstance(journal_for("memory://"), MemoryJournal)
    sqlite_journal = journal_for("sqlite:////tmp/x.db")
    assert isinstance(sqlite_journal, SQLiteJournal)
    assert sqlite_journal.path == "/tmp/x.db"
    redis_journal = journal_for("redis://127.0.0.1:6390/2?prefix=app1:")
    assert isinstance(redis_journal, RedisJournal)
    assert (redis_journal.url, redis_journal.prefix) == ("redis://127.0.0.1:6390/2", "app1:")
    with pytest.raises(ValueError, match="unknown store 'postgres://x'"):
        journal_for("postgres://x")
    # A password in an unknown store URL is not repeated in the error.
    with pytest.raises(ValueError, match=r"unknown store 'mysql://\*\*\*@db:3306/x'"):
        journal_for("mysql://user:hunter2@db:3306/x")
    with pytest.raises(ValueError, match="prefix"):
        journal_for("redis://127.0.0.1:6390/0?prefix=a{b}")
    with pytest.raises(ValueError):
        journal_for("sqlite:///")


@pytest.mark.anyio
async def test_one_cancelled_append_does_not_cancel_the_others_of_its_commit(
    journal: Journal,
) -> None:
    for name in ("a", "b"):
        await journal.create(meta(name), streaming(0))
    first = asyncio.create_task(journal.append("a", frames(1, 1), streaming(1)))
    second = asyncio.create_task(journal.append("b", frames(1, 1), streaming(1)))
    await asyncio.sleep(0)  # both queued in the same group commit
    first.cancel()
    await second
    assert await journal.read_after("a", 0, 10) == frames(1, 1)  # it landed all the same
    assert await journal.read_after("b", 0, 10) == frames(1, 1)
