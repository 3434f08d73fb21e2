"""What lets several processes share one SQLite journal, on real sockets and a real file: the
commit notices' protocol (``sqlite_notices.py``; producer and reader side in one process, the
reader linking to this process's own socket) and idempotency claims across two journals on one
file. Whole processes: ``tests/integration/test_proxy_workers.py``."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

import pytest

from unbroken.finish import Status
from unbroken.streams.journal import FrameRecord, SQLiteJournal, StreamMeta, StreamState
from unbroken.streams.journal.holder import local_pid, new_owner
from unbroken.streams.journal.sqlite_commit import GroupCommit
from unbroken.streams.journal.sqlite_notices import CommitNotices, NoticeWatch
from unbroken.streams.journal.sqlite_schema import connect

pytestmark = pytest.mark.anyio
BOUND_S = 10.0  # every wait here is for something already sent


def _state(status: Status, last_seq: int) -> StreamState:
    return StreamState(status=status, updated=1.0, last_seq=last_seq)


def _frame(seq: int) -> FrameRecord:
    return FrameRecord(seq, None, b"x", "x")


async def test_a_watch_is_told_when_watching_on_each_commit_and_at_the_end(
        tmp_path: Path) -> None:
    live = {"s1"}
    cancels: list[str] = []
    producer = CommitNotices(str(tmp_path / "j.db"), live=live.__contains__,
                             on_cancel=cancels.append)
    reader = CommitNotices(str(tmp_path / "j.db"), live=lambda _id: False,
                           on_cancel=cancels.append)
    await producer.serve()
    try:
        watch = NoticeWatch(reader, "s1", os.getpid(), ended=False)
        await watch.start()
        async with asyncio.timeout(BOUND_S):
            assert await watch.wait(0, BOUND_S) == []  # "=": watching (read again now)
        assert await watch.wait(0, 0.01) is None  # nothing landed
        producer.landed([("s1", [_frame(1)], _state(Status.STREAMING, 1)),
                         ("s2", [_frame(1)], _state(Status.STREAMING, 1))])
        async with asyncio.timeout(BOUND_S):
            assert await watch.wait(1, BOUND_S) == []
        producer.landed([("s1", [_frame(2)], _state(Status.COMPLETED, 2))])
        async with asyncio.timeout(BOUND_S):
            assert await watch.wait(2, BOUND_S) is None  # "!": look at the stream at once
        assert await watch.wait(2, 0.01) is None  # then only the slow re-read is left
        await watch.aclose()
        # An unknown stream is "not live here"; a cancel reaches the producer's callback.
        other = NoticeWatch(reader, "s3", os.getpid(), ended=False)
        await other.start()
        async with asyncio.timeout(BOUND_S):
            assert await other.wait(0, BOUND_S) is None
        link = await reader.link(os.getpid())
        assert link is not None
        link.send("xs1")
        link.send("xs3")
        async with asyncio.timeout(BOUND_S):
            while not cancels:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        assert cancels == ["s1"]
    finally:
        await reader.close()
        await producer.close()


async def test_a_lost_producer_wakes_its_watchers_at_once(tmp_path: Path) -> None:
    producer = CommitNotices(str(tmp_path / "j.db"), live=lambda _id: True,
                             on_cancel=lambda _id: None)
    reader = CommitNotices(str(tmp_path / "j.db"), live=lambda _id: False,
                           on_cancel=lambda _id: None)
    await producer.serve()
    try:
        watch = NoticeWatch(reader, "s1", os.getpid(), ended=False)
        await watch.start()
        async with asyncio.timeout(BOUND_S):
            assert await watch.wait(0, BOUND_S) == []
        waiting = asyncio.ensure_future(watch.wait(0, BOUND_S))
        await asyncio.sleep(0.05)
        await producer.close()  # as a process that died: its connections close
        async with asyncio.timeout(BOUND_S):
            assert await waiting is None
        # No producer listens any more: no link, the watch waits out its timeout.
        assert await watch.wait(0, 0.01) is None
        assert await reader.link(os.getpid()) is None
    finally:
        await reader.close()
        await producer.close()


async def test_no_link_without_a_producer_on_this_host(tmp_path: Path) -> None:
    reader = CommitNotices(str(tmp_path / "j.db"), live=lambda _id: False,
                           on_cancel=lambda _id: None)
    watch = NoticeWatch(reader, "s1", None, ended=False)
    await watch.start()
    assert await watch.wait(0, 0.01) is None
    assert local_pid(new_owner()) == os.getpid()
    assert local_pid("proxy_ab@elsewhere/123/456") is None
    assert local_pid("an-old-owner-id") is None


async def test_one_idempotency_key_is_claimed_by_one_journal_of_a_file(tmp_path: Path) -> None:
    path = str(tmp_path / "j.db")
    one, two = SQLiteJournal(path), SQLiteJournal(path)
    await one.open()
    await two.open()  # the same pid: its notices cannot listen (a warning), claims still work
    try:
        assert await one.claim_idempotent("k", "claim:a", 30)
        assert not await two.claim_idempotent("k", "claim:b", 30)
        assert await one.claim_idempotent("k", "claim:a", 30)  # renewed by its holder
        await one.release_idempotent("k", "claim:b")  # not b's to release
        assert not await two.claim_idempotent("k", "claim:b", 30)
        await one.release_idempotent("k", "claim:a")
        assert await two.claim_idempotent("k", "claim:b", 0)
        assert await one.claim_idempotent("k", "claim:a", 30)  # b's claim expired at once
        meta = StreamMeta(stream_id="s1", dialect="openai-chat", created=1.0,
                          media_type="text/event-stream", token_hash="t" * 64,
                          idempotency_hash="k")
        await one.create(meta, _state(Status.PENDING, 0))
        await one.release_idempotent("k", "claim:a")
        assert not await two.claim_idempotent("k", "claim:b", 30)  # the key made a stream
        assert await two.claim_idempotent("k", "claim:b", 30, replacing="s1")
    finally:
        await two.close()
        await one.close()


async def test_a_group_commit_holds_the_write_lock_before_its_writes_read(
        tmp_path: Path) -> None:
    """A claim reads, then writes. Another process's commit between the two used to fail the
    whole batch at once with "database is locked" (a deferred transaction cannot move its
    snapshot forward, and the busy timeout does not apply): seen as a 503 from two replicas
    starting one idempotency key together."""
    path = str(tmp_path / "j.db")
    journal = SQLiteJournal(path)
    await journal.open()
    await journal.close()
    conn = connect(path, read_only=False)
    other = sqlite3.connect(path, isolation_level=None, timeout=0.2)  # another process
    refused: list[str] = []

    def claim(writer: sqlite3.Connection) -> int:
        held = writer.execute("SELECT COUNT(*) FROM claims").fetchone()[0]
        try:
            other.execute("INSERT INTO claims (key, claimer, expires) VALUES ('k2', 'b', 1)")
        except sqlite3.OperationalError as exc:
            refused.append(str(exc))
        writer.execute("INSERT INTO claims (key, claimer, expires) VALUES ('k1', 'a', 1)")
        return int(held)

    batch = GroupCommit(asyncio.get_running_loop().create_future())
    batch.writes.append(claim)
    try:
        assert batch.commit(conn) == [0]
        assert refused == ["database is locked"]  # it waited for the lock, then gave up
        rows = other.execute("SELECT key, claimer FROM claims").fetchall()
        assert rows == [("k1", "a")]
    finally:
        other.close()
        conn.close()
