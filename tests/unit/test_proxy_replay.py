"""Where a reader starts (``events_cursor``), what the live tail's cache answers and how it
wakes its readers."""

from __future__ import annotations

import asyncio

import pytest

from unbroken.streams.access import events_cursor
from unbroken.streams.journal import FrameRecord, LiveTail

SID = "ub_0123456789abcdef01234567"


def test_events_cursor_prefers_last_event_id() -> None:
    assert events_cursor(SID, {}, {}) == 0
    assert events_cursor(SID, {}, {"after": "7"}) == 7
    assert events_cursor(SID, {"last-event-id": f"{SID}:3"}, {"after": "7"}) == 3
    assert events_cursor(SID, {"last-event-id": f" {SID}:0 "}, {}) == 0


@pytest.mark.parametrize(
    ("headers", "query"),
    [
        ({"last-event-id": "ub_other000000000000000000:3"}, {}),
        ({"last-event-id": f"{SID}:x"}, {}),
        ({"last-event-id": f"{SID}:-1"}, {}),
        ({"last-event-id": "3"}, {}),
        ({}, {"after": "-1"}),
        ({}, {"after": "2.5"}),
        ({}, {"after": "\uff13"}),
        ({"last-event-id": f"{SID}:" + "9" * 30}, {}),  # past a journal's 64-bit seq
        ({}, {"after": str(2**63)}),
    ],
)
def test_events_cursor_refuses_what_does_not_name_a_seq_of_this_stream(
    headers: dict[str, str], query: dict[str, str]
) -> None:
    assert events_cursor(SID, headers, query) is None


def frames(first: int, last: int) -> list[FrameRecord]:
    return [FrameRecord(seq, None, b"x") for seq in range(first, last + 1)]


def test_live_tail_cache_is_bounded_and_knows_what_it_lost() -> None:
    tail = LiveTail(SID, max_frames=3)
    assert tail.after(0) == []
    tail.publish(frames(1, 2), ended=False)
    assert tail.after(0) == frames(1, 2)
    assert tail.after(1) == frames(2, 2)
    assert tail.after(2) == []
    tail.publish(frames(3, 5), ended=False)
    assert tail.last_seq == 5
    assert tail.after(1) is None  # frame 2 left the cache: read it from storage
    assert tail.after(2) == frames(3, 5)
    assert tail.after(4) == frames(5, 5)
    assert tail.after(9) == []
    assert not tail.ended
    tail.close()
    assert tail.ended


def test_live_tail_keeps_a_whole_commit_beyond_its_frame_count() -> None:
    tail = LiveTail(SID, max_frames=3)
    tail.publish(frames(1, 2), ended=False)
    tail.publish(frames(3, 8), ended=False)  # one commit of six frames
    assert tail.after(2) == frames(3, 8)  # a reader that kept up finds the whole commit
    assert tail.after(1) is None
    tail.publish(frames(9, 9), ended=False)
    assert tail.after(6) == frames(7, 9)  # then the count bound again: three frames in all
    assert tail.after(5) is None


def test_live_tail_lets_go_of_what_every_reader_has_read() -> None:
    tail = LiveTail(SID, max_frames=32)
    tail.publish(frames(1, 4), ended=False)  # nobody reads yet: the bounds alone
    assert tail.after(0) == frames(1, 4)
    fast, slow = tail.attach(0), tail.attach(0)
    LiveTail.advance(fast, 4)
    LiveTail.advance(slow, 2)
    tail.publish(frames(5, 5), ended=False)
    assert tail.after(2) == frames(3, 5)  # the slow reader's frames stay
    assert tail.after(1) is None  # read by both: gone
    tail.detach(slow)
    tail.publish(frames(6, 6), ended=False)
    assert tail.after(4) == frames(5, 6)  # only the fast reader left: it read up to 4
    assert tail.after(3) is None
    LiveTail.advance(fast, 6)
    tail.publish(frames(7, 8), ended=False)
    assert tail.after(6) == frames(7, 8)  # a reader that keeps up: the commit unread yet
    assert tail.after(5) is None
    assert tail.readers == 1


def test_live_tail_cache_is_bounded_by_bytes_but_keeps_the_newest_frame() -> None:
    tail = LiveTail(SID, max_frames=10, max_bytes=5)
    tail.publish([FrameRecord(seq, None, b"ab") for seq in (1, 2, 3)], ended=False)
    assert tail.after(0) is None  # 6 bytes: frame 1 left the cache
    assert [frame.seq for frame in tail.after(1) or []] == [2, 3]
    tail.publish([FrameRecord(4, None, b"x" * 9)], ended=False)  # alone over the bound
    assert tail.after(2) is None
    assert tail.after(3) == [FrameRecord(4, None, b"x" * 9)]
    tail.publish([FrameRecord(5, None, b"")], ended=False)  # frame 4 still over it: dropped
    assert tail.after(3) is None
    assert tail.after(4) == [FrameRecord(5, None, b"")]
    assert tail.after(5) == []


def test_live_tail_counts_readers() -> None:
    tail = LiveTail(SID)
    seen: list[int] = []
    tail.on_readers = seen.append
    first = tail.attach()
    second = tail.attach()
    tail.detach(first)
    tail.detach(second)
    assert (seen, tail.readers) == ([1, 2, 1, 0], 0)


@pytest.mark.anyio
async def test_live_tail_wakes_every_waiter_once_per_commit_and_forgets_one_that_left() -> None:
    tail = LiveTail(SID)
    first = asyncio.ensure_future(tail.wait())
    second = asyncio.ensure_future(tail.wait())
    leaving = asyncio.ensure_future(tail.wait())
    await asyncio.sleep(0)
    leaving.cancel()
    await asyncio.sleep(0)
    assert len(tail._waiters or ()) == 2  # the reader that left is not kept until a commit
    tail.publish(frames(1, 1), ended=False)
    await asyncio.wait_for(asyncio.gather(first, second), timeout=5)
    assert tail._waiters is None  # nothing is held between commits
    later = asyncio.ensure_future(tail.wait())
    await asyncio.sleep(0.01)
    assert not later.done()  # a wait begun after the commit waits for the next one
    tail.close()
    await asyncio.wait_for(later, timeout=5)
    assert tail.ended


@pytest.mark.anyio
async def test_live_tail_pulse_wakes_a_waiter_without_a_commit() -> None:
    tail = LiveTail(SID)
    await asyncio.wait_for(tail.wait(pulse=0.01), timeout=5)
    assert tail.last_seq == 0
