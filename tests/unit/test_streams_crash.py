"""Crash safety pieces in every journal: a lease holder known dead (``journal/holder.py``), the
write-ahead record's ``answered`` and ``discard``, ``Recovery`` at once for a dead holder, a
finish frame deciding a recovered stream's end, and the reader's end notice agreeing with it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from unbroken.finish import STATUS_OF_REASON, FinishReason, Status
from unbroken.proxy.producer_lost import recovered_end
from unbroken.proxy.replay import end_notice
from unbroken.proxy.wire import downstream_for
from unbroken.streams.journal import FrameRecord, Journal, Lease, StreamMeta, StreamState
from unbroken.streams.journal.holder import known_dead, new_owner
from unbroken.streams.lease import LeaseKeeper, Recovery

HOST = new_owner().partition("@")[2].partition("/")[0]


def _meta(stream_id: str, *, key: str | None = None) -> StreamMeta:
    return StreamMeta(stream_id=stream_id, dialect="openai-chat", created=1.0,
                      media_type="text/event-stream", token_hash="t", credential_hash="c",
                      idempotency_hash=key, request_hash=None if key is None else "r")


def _dead_owner() -> str:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=30)
    return f"proxy_x@{HOST}/{child.pid}/1"


def test_this_process_is_alive_and_a_finished_one_is_dead() -> None:
    mine = new_owner("server")
    assert mine.startswith("server_") and f"@{HOST}/{os.getpid()}/" in mine
    assert not known_dead(mine)
    assert known_dead(_dead_owner())
    # The pid of a live process with another start time: it was reused, the holder is gone.
    assert known_dead(f"proxy_x@{HOST}/{os.getpid()}/1")


@pytest.mark.parametrize("owner", [
    "proxy_0123456789abcdef",  # an older proxy's id: never judged
    "proxy_x@0000000000000000/1/1",  # another host
    f"proxy_x@{HOST}/notapid/1",
    "",
])
def test_holders_that_cannot_be_judged_are_not_dead(owner: str) -> None:
    assert not known_dead(owner)


def test_a_finish_reason_decides_one_status() -> None:
    assert {reason: STATUS_OF_REASON[reason] for reason in FinishReason} == {
        FinishReason.STOP: Status.COMPLETED, FinishReason.TOOL_CALLS: Status.COMPLETED,
        FinishReason.PAUSE: Status.COMPLETED, FinishReason.OTHER: Status.COMPLETED,
        FinishReason.LENGTH: Status.TRUNCATED, FinishReason.CONTENT_FILTER: Status.FILTERED,
        FinishReason.ERROR: Status.FAILED,
    }


@pytest.mark.anyio
async def test_answered_and_discard(journal: Journal) -> None:
    await journal.create(_meta("w1", key="k1"),
                         StreamState(status=Status.PENDING, updated=time.time()))
    pending = await journal.find_idempotent("k1")
    assert pending is not None and pending.state.status is Status.PENDING
    answered = StreamMeta(stream_id="w1", dialect="openai-chat", created=1.0,
                          media_type="text/event-stream; charset=utf-8", token_hash="t",
                          credential_hash="c", idempotency_hash="k1", request_hash="r",
                          response_headers=(("x-request-id", "abc"),))
    await journal.answered(answered)
    record = await journal.get("w1")
    assert record is not None and record.meta == answered
    await journal.discard("w1")
    assert journal.tail("w1") is None
    assert await journal.get("w1") is None
    assert await journal.find_idempotent("k1") is None
    assert await journal.unfinished() == []
    assert (await journal.list_streams()).streams == ()
    assert await journal.tombstone("w1") is None
    with pytest.raises(KeyError):
        await journal.answered(answered)


async def _orphan(journal: Journal, stream_id: str, owner: str, *, finish: str | None,
                  status: Status = Status.STREAMING) -> None:
    """A stream whose producer died: two frames, a lease that runs for a minute more."""
    await journal.create(_meta(stream_id), StreamState(status=Status.PENDING, updated=1.0),
                         Lease(owner, time.time() + 60))
    if status is Status.STREAMING:
        await journal.append(stream_id, [FrameRecord(1, None, b'{"a":1}', "a"),
                                         FrameRecord(2, None, b'{"b":2}', "b")],
                             StreamState(status=status, updated=1.0, last_seq=2,
                                         finish_reason=finish, raw_finish_reason=finish))
    journal.release(stream_id)  # its producer is not in this process


@pytest.mark.anyio
async def test_a_dead_holders_streams_are_recovered_at_startup(journal: Journal) -> None:
    dead = _dead_owner()
    await _orphan(journal, "cut", dead, finish=None)
    await _orphan(journal, "done", dead, finish="length")
    await _orphan(journal, "asked", dead, finish=None, status=Status.PENDING)
    await _orphan(journal, "alive", new_owner(), finish=None)  # this process: a live holder
    keeper = LeaseKeeper(journal, ttl=5, renew_every=1)
    recovery = Recovery(journal, keeper, recovered_end)
    assert await recovery.startup() == 3
    recovery.close()
    cut = await journal.get("cut")
    assert cut is not None and (cut.state.status, cut.state.last_seq) == (Status.INTERRUPTED, 3)
    # The finish frame was journaled: the provider decided (truncated), no frame is added.
    done = await journal.get("done")
    assert done is not None
    assert (done.state.status, done.state.last_seq, done.state.finish_reason,
            done.state.error) == (Status.TRUNCATED, 2, "length", None)
    assert await journal.read_after("done", 2, 10) == []
    asked = await journal.get("asked")
    assert asked is not None and (asked.state.status, asked.state.last_seq) == (
        Status.INTERRUPTED, 1)
    assert "before the provider answered" in asked.state.error["message"]  # type: ignore[index]
    alive = await journal.get("alive")
    assert alive is not None and alive.state.status is Status.STREAMING


@pytest.mark.anyio
async def test_a_reader_past_a_finish_frame_gets_no_notice(journal: Journal) -> None:
    # The finish decides: a response whose frames ran out after it ends as the finish says,
    # not with the proxy's "incomplete" notice (which an SDK would raise on).
    await _orphan(journal, "f", "proxy_x@elsewhere/1/1", finish="stop")
    await _orphan(journal, "n", "proxy_x@elsewhere/1/1", finish=None)
    downstream = downstream_for("openai-chat", "text/event-stream", events_endpoint=False,
                                retry_ms=None)
    assert await end_notice(journal, "f", downstream, cursor=2) is None
    notice = await end_notice(journal, "n", downstream, cursor=2)
    assert notice is not None and b'"code":"stream_incomplete"' in notice
