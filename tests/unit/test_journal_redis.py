"""``RedisJournal`` as several processes see it: two journals on one real redis-server stand for
two proxy replicas (the interface every journal keeps is tested in ``test_journal.py``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis.asyncio
import redis.exceptions
from tests.redis_server import running_redis
from tests.unit.test_journal import collect, frames, meta, streaming

from unbroken.finish import Status
from unbroken.proxy.producer_lost import recovered_end
from unbroken.streams.journal import FrameRecord, Lease, RedisJournal, StreamState
from unbroken.streams.lease import LeaseKeeper, Recovery

pytestmark = pytest.mark.anyio

WAIT_S = 10.0


@pytest.fixture
async def pair(redis_url: str) -> AsyncIterator[tuple[RedisJournal, RedisJournal]]:
    """Two journals on one Redis: ``a`` produces, ``b`` is another replica."""
    a, b = RedisJournal(redis_url, tail_frames=4), RedisJournal(redis_url, tail_frames=4)
    await a.open()
    await b.open()
    try:
        yield a, b
    finally:
        await b.close()
        await a.close()


def completed(last_seq: int) -> StreamState:
    return StreamState(status=Status.COMPLETED, updated=200.0, last_seq=last_seq,
                       finish_reason="stop", raw_finish_reason="stop")


async def settle() -> None:
    """Let the event loop run the flushes and wake-ups already due."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_another_replica_follows_stored_then_live_frames_to_the_end(
    pair: tuple[RedisJournal, RedisJournal],
) -> None:
    a, b = pair
    await a.create(meta(), streaming(0))
    await a.append("s1", frames(1, 5), streaming(5))
    assert b.tail("s1") is None  # b has no producer: it reads Redis
    reader = asyncio.create_task(collect(b, "s1", 2))
    await asyncio.sleep(0.05)  # b is blocked in XREAD by now (or catches up in storage)
    for first in range(6, 15, 3):
        await a.append("s1", frames(first, first + 2), streaming(first + 2))
    await a.append("s1", frames(15, 16), completed(16))
    assert await asyncio.wait_for(reader, WAIT_S) == frames(3, 16)
    record = await b.get("s1")
    assert record is not None
    assert (record.state.status, record.state.last_seq, record.text) == (
        Status.COMPLETED, 16, "".join(f"<{n}>" for n in range(1, 17)))


async def test_an_end_without_frames_wakes_the_other_replicas_readers(
    pair: tuple[RedisJournal, RedisJournal],
) -> None:
    a, b = pair
    await a.create(meta(), streaming(0))
    await a.append("s1", frames(1, 2), streaming(2))
    reader = asyncio.create_task(collect(b, "s1", 0))
    await asyncio.sleep(0.05)
    await a.set_status("s1", StreamState(status=Status.CANCELLED, updated=1.0, last_seq=2))
    assert await asyncio.wait_for(reader, WAIT_S) == frames(1, 2)


async def test_keepalives_while_another_replicas_stream_is_quiet(
    pair: tuple[RedisJournal, RedisJournal],
) -> None:
    a, b = pair
    await a.create(meta(), streaming(0))
    follower = b.follow("s1", 0, keepalive=0.02)
    assert await asyncio.wait_for(follower.__anext__(), WAIT_S) == []
    await a.append("s1", frames(1, 1), streaming(1))
    got = await asyncio.wait_for(follower.__anext__(), WAIT_S)
    while got == []:  # a keep-alive may come first
        got = await asyncio.wait_for(follower.__anext__(), WAIT_S)
    assert got == frames(1, 1)
    await a.append("s1", [], completed(1))
    rest = [batch async for batch in follower]
    assert [frame for batch in rest for frame in batch] == []
    await follower.aclose()


async def test_a_reader_hands_a_stream_with_an_expired_lease_to_on_orphan(
    pair: tuple[RedisJournal, RedisJournal],
) -> None:
    a, b = pair
    await a.create(meta(), streaming(0), Lease("proxy_a", time.time() + 0.2))
    await a.append("s1", frames(1, 3), streaming(3))
    orphans: list[str] = []
    error = FrameRecord(4, None, b'{"error":{"code":"proxy_restarted"}}')

    async def recover(stream_id: str) -> None:
        orphans.append(stream_id)
        await b.append(stream_id, [error], StreamState(status=Status.INTERRUPTED, updated=2.0,
                                                       last_seq=4))

    b.on_orphan = recover
    got = await asyncio.wait_for(_follow(b, 1), WAIT_S)
    assert got == [*frames(2, 3), error]
    assert orphans == ["s1"]
    record = await a.get("s1", with_text=False)
    assert record is not None and record.state.status is Status.INTERRUPTED


async def _follow(journal: RedisJournal, after: int) -> list[FrameRecord]:
    return [f async for batch in journal.follow("s1", after, keepalive=0.05) for f in batch]


async def test_a_live_lease_is_never_handed_to_on_orphan(
    pair: tuple[RedisJournal, RedisJournal],
) -> None:
    a, b = pair
    await a.create(meta(), streaming(0), Lease("proxy_a", time.time() + 60))
    orphans: list[str] = []

    async def recover(stream_id: str) -> None:
        orphans.append(stream_id)

    b.on_orphan = recover
    follower = b.follow("s1", 0, keepalive=0.02)
    for _ in range(3):  # three idle rounds, each ending in a lease check
        assert await asyncio.wait_for(follower.__anext__(), WAIT_S) == []
    await follower.aclose()
    assert orphans == []


async def test_cancel_requests_reach_every_replica(
    pair: tuple[RedisJournal, RedisJournal],
) -> None:
    a, b = pair
    heard: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    a.on_cancel = lambda stream_id: heard.put_nowait(("a", stream_id))
    b.on_cancel = lambda stream_id: heard.put_nowait(("b", stream_id))
    assert await b.request_cancel("ub_x") is True
    got = {await asyncio.wait_for(heard.get(), WAIT_S) for _ in range(2)}
    assert got == {("a", "ub_x"), ("b", "ub_x")}


async def test_a_refused_append_writes_nothing_and_fails_alone(
    pair: tuple[RedisJournal, RedisJournal],
) -> None:
    a, _b = pair
    for name in ("x", "y"):
        await a.create(meta(name), streaming(0))
        await a.append(name, frames(1, 2), streaming(2))
    # One turn, one pipeline: x's frames skip seq 5 (refused whole), y's land.
    bad = asyncio.ensure_future(a.append("x", [*frames(3, 4), *frames(6, 6)], streaming(6)))
    good = asyncio.ensure_future(a.append("y", frames(3, 4), streaming(4)))
    with pytest.raises(ValueError, match="seq 6, expected the next after 4"):
        await bad
    await good
    assert await a.read_after("x", 0, 10) == frames(1, 2)
    assert await a.read_after("y", 0, 10) == frames(1, 4)
    record = await a.get("x")
    assert record is not None and (record.state.last_seq, record.text) == (2, "<1><2>")
    with pytest.raises(KeyError, match="unknown stream nope"):
        await a.append("nope", frames(1, 1), streaming(1))


async def test_appends_go_on_after_redis_lost_its_scripts(
    pair: tuple[RedisJournal, RedisJournal], redis_url: str,
) -> None:
    a, b = pair
    await a.create(meta(), streaming(0))
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        await client.script_flush()
    finally:
        await client.aclose()
    await a.append("s1", frames(1, 3), streaming(3))  # NOSCRIPT: loaded again, run once
    await b.set_lease("s1", Lease("proxy_b", 5.0))
    assert await b.read_after("s1", 0, 10) == frames(1, 3)
    assert await a.lease("s1") == Lease("proxy_b", 5.0)


async def test_leases_move_between_owners_and_renew_only_live_streams(
    pair: tuple[RedisJournal, RedisJournal],
) -> None:
    a, b = pair
    await a.create(meta("live"), streaming(0), Lease("proxy_a", 10.0))
    await a.create(meta("done"), streaming(0), Lease("proxy_a", 10.0))
    await a.append("done", frames(1, 1), completed(1))
    assert await a.renew_leases("proxy_a", 20.0) == 1
    assert await b.lease("live") == Lease("proxy_a", 20.0)
    assert await b.lease("done") == Lease("proxy_a", 10.0)
    await b.set_lease("live", Lease("proxy_b", 30.0))  # a re-attach by another replica
    assert await a.renew_leases("proxy_a", 40.0) == 0
    assert await b.renew_leases("proxy_b", 50.0) == 1
    assert await a.lease("live") == Lease("proxy_b", 50.0)
    with pytest.raises(KeyError):
        await a.set_lease("nope", Lease("proxy_a", 1.0))


async def test_prefixes_keep_two_proxies_apart_on_one_redis(redis_url: str) -> None:
    first = RedisJournal(redis_url + "?prefix=team1:")
    second = RedisJournal(redis_url + "?prefix=team2:")
    await first.open()
    await second.open()
    try:
        await first.create(meta(), streaming(0))
        await first.append("s1", frames(1, 1), completed(1))
        assert await second.get("s1") is None
        await second.create(meta(), streaming(0))  # the same id is free under another prefix
        assert await second.read_after("s1", 0, 10) == []
        assert await first.unfinished() == []
        assert await second.unfinished() == ["s1"]
        heard: list[str] = []
        first.on_cancel = heard.append
        assert await second.request_cancel("s1") is True  # second hears itself only
        await asyncio.sleep(0.1)
        assert heard == []
    finally:
        await second.close()
        await first.close()


async def test_idempotency_finds_the_newest_stream_and_forgets_purged_ones(
    pair: tuple[RedisJournal, RedisJournal],
) -> None:
    a, b = pair
    for name, created in (("old", 10.0), ("new", 20.0)):
        await a.create(replace(meta(name, created), idempotency_hash="h" * 64),
                       streaming(0, created))
        await a.append(name, frames(1, 1), StreamState(status=Status.COMPLETED,
                                                       updated=created, last_seq=1))
    found = await b.find_idempotent("h" * 64)
    assert found is not None and found.meta.stream_id == "new"
    assert await b.expire(15.0) == 1  # "old" goes; the key still names "new"
    found = await b.find_idempotent("h" * 64)
    assert found is not None and found.meta.stream_id == "new"
    assert await b.expire(25.0) == 1
    assert await b.find_idempotent("h" * 64) is None


async def test_a_lost_redis_fails_appends_loudly(tmp_path: Path) -> None:
    with running_redis(tmp_path / "lost") as url:
        journal = RedisJournal(url)
        await journal.open()
        await journal.create(meta(), streaming(0))
        await journal.append("s1", frames(1, 1), streaming(1))
    try:
        with pytest.raises(redis.exceptions.ConnectionError):
            await journal.append("s1", frames(2, 2), streaming(2))
    finally:
        await journal.close()


async def test_one_script_call_commits_every_append_of_a_turn(
    pair: tuple[RedisJournal, RedisJournal],
) -> None:
    a, b = pair
    for n in range(20):
        await a.create(meta(f"s{n}"), streaming(0))
    before = a.commits
    for seq in range(1, 11):  # 20 streams' appends in one turn, ten times
        await asyncio.gather(
            *(a.append(f"s{n}", frames(seq, seq), streaming(seq)) for n in range(20)))
    assert a.commits - before == 10
    for n in range(20):
        assert await b.read_after(f"s{n}", 0, 100) == frames(1, 10)
        record = await b.get(f"s{n}")
        assert record is not None and record.state.last_seq == 10


async def test_a_follow_ends_when_the_stream_is_purged_under_it(
    pair: tuple[RedisJournal, RedisJournal],
) -> None:
    a, b = pair
    await a.create(meta(), streaming(0))
    await a.append("s1", frames(1, 2), streaming(2))
    a.release("s1")  # as if its producer were gone: nothing keeps it from a purge
    follower = b.follow("s1", 0, keepalive=0.02)
    assert await asyncio.wait_for(follower.__anext__(), WAIT_S) == frames(1, 2)
    assert await a.expire(time.time() + 60) == 1
    rest = [batch async for batch in follower]  # ends: no wait on a stream that is gone
    assert all(batch == [] for batch in rest)


async def test_two_replicas_settling_one_orphan_write_one_end(
    pair: tuple[RedisJournal, RedisJournal],
) -> None:
    a, b = pair
    await a.create(replace(meta(), dialect="openai-chat"), streaming(0),
                   Lease("proxy_dead", time.time() - 1))
    await a.append("s1", frames(1, 2), streaming(2))
    a.release("s1")
    first = Recovery(a, LeaseKeeper(a, ttl=15, renew_every=5), recovered_end)
    second = Recovery(b, LeaseKeeper(b, ttl=15, renew_every=5), recovered_end)
    settled = await asyncio.gather(first.settle("s1"), second.settle("s1"))
    assert [record is not None and record.state.status for record in settled] == [
        Status.INTERRUPTED, Status.INTERRUPTED]
    stored = await b.read_after("s1", 0, 10)
    assert [frame.seq for frame in stored] == [1, 2, 3]  # one error frame, not two
    assert b"proxy_restarted" in stored[-1].data


async def test_an_append_resent_after_a_lost_reply_is_taken_once(
    pair: tuple[RedisJournal, RedisJournal],
) -> None:
    a, b = pair
    await a.create(meta(), streaming(0))
    batch = [("s1", frames(1, 3), streaming(3), None)]
    assert await a._commit(batch) == [3]
    # redis-py resends a command whose reply a dropped connection lost: the same frames again
    # are a no-op, not a refusal that would fail the stream.
    assert await a._commit(batch) == [3]
    assert await b.read_after("s1", 0, 10) == frames(1, 3)
    record = await b.get("s1")
    assert record is not None and (record.state.last_seq, record.text) == (3, "<1><2><3>")
    # Other data under a stored seq is still refused.
    other = [FrameRecord(2, None, b'{"n":"other"}', "<2>"), *frames(3, 3)]
    (refused,) = await a._commit([("s1", other, streaming(3), None)])
    assert isinstance(refused, redis.exceptions.ResponseError)
    assert str(refused) == "BADSEQ stream s1: seq 2 is stored already, with other data"


async def test_an_idempotency_key_is_claimed_by_one_replica_until_it_creates_or_lets_go(
    pair: tuple[RedisJournal, RedisJournal],
) -> None:
    a, b = pair
    key = "k" * 64
    assert await a.claim_idempotent(key, "claim:a", 60) is True
    assert await b.claim_idempotent(key, "claim:b", 60) is False
    assert await a.claim_idempotent(key, "claim:a", 60) is True  # its holder renews it
    assert await b.find_idempotent(key) is None  # a claim names no stream yet
    await a.create(replace(meta("s1"), idempotency_hash=key), streaming(0))
    found = await b.find_idempotent(key)
    assert found is not None and found.meta.stream_id == "s1"
    assert await b.claim_idempotent(key, "claim:b", 60) is False  # the key names a stream
    assert await b.claim_idempotent(key, "claim:b", 60, replacing="s1") is True  # expired one
    await a.release_idempotent(key, "claim:a")  # not a's claim any more: nothing changes
    assert await a.claim_idempotent(key, "claim:a", 60) is False
    await b.release_idempotent(key, "claim:b")
    assert await a.claim_idempotent(key, "claim:a", 0.05) is True
    await asyncio.sleep(0.2)  # an unrenewed claim lapses: its holder died mid-create
    assert await b.claim_idempotent(key, "claim:b", 60) is True


async def test_a_sweep_settles_only_the_streams_of_a_dead_replica(
    pair: tuple[RedisJournal, RedisJournal],
) -> None:
    a, b = pair
    await a.create(replace(meta("dead"), dialect="anthropic"), streaming(0),
                   Lease("proxy_dead", time.time() - 1))
    await a.create(meta("live"), streaming(0), Lease("proxy_live", time.time() + 60))
    for name in ("dead", "live"):
        await a.append(name, frames(1, 2), streaming(2))
        a.release(name)  # produced by other processes, as far as b can tell
    sweeper = Recovery(b, LeaseKeeper(b, ttl=15, renew_every=5), recovered_end)
    assert await sweeper.sweep() == 1
    dead, live = await b.get("dead"), await b.get("live")
    assert dead is not None and live is not None
    assert (dead.state.status, dead.state.last_seq) == (Status.INTERRUPTED, 3)
    assert (live.state.status, live.state.last_seq) == (Status.STREAMING, 2)
    assert await b.unfinished() == ["live"]
    assert await sweeper.sweep() == 0  # nothing left to settle
