"""A reader follows, on one real SQLite file, a stream another real process produces.

The reader's journal re-reads the file only every hour (``orphan_check``), so every frame that
reaches it before the test's bound came through the producer's commit notices: the live tail
exactly (seqs 1..N, no duplicate, no gap, then the end); a cancel carried to the producer; and a
producer SIGKILLed mid-stream handed to ``on_orphan`` at once (its link broke), not an hour later.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest

from unbroken.finish import Status
from unbroken.streams.journal import FrameRecord, SQLiteJournal, StreamState

pytestmark = [pytest.mark.anyio, pytest.mark.integration]
BOUND_S = 30.0  # a bound only: everything here is woken by a notice

PRODUCER = """
import asyncio, sys, time
from unbroken.finish import Status
from unbroken.streams.journal import FrameRecord, Lease, SQLiteJournal, StreamMeta, StreamState
from unbroken.streams.journal.holder import new_owner

async def main() -> None:
    journal = SQLiteJournal(sys.argv[1])
    await journal.open()
    journal.on_cancel = lambda stream_id: print("cancel", stream_id, flush=True)
    meta = StreamMeta(stream_id=sys.argv[2], dialect="openai-chat", created=1.0,
                      media_type="text/event-stream", token_hash="t" * 64)
    await journal.create(meta, StreamState(status=Status.STREAMING, updated=1.0),
                         Lease(new_owner(), time.time() + 3600))
    print("ready", flush=True)
    seq = 0
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := (await reader.readline()).decode().split():
        if line[0] == "frames":
            count = int(line[1])
            frames = [FrameRecord(seq + i, None, b"d%d" % (seq + i), "t%d" % (seq + i))
                      for i in range(1, count + 1)]
            seq += count
            await journal.append(meta.stream_id, frames,
                                 StreamState(status=Status.STREAMING, updated=1.0, last_seq=seq))
        elif line[0] == "end":
            await journal.append(meta.stream_id, [],
                                 StreamState(status=Status.COMPLETED, updated=1.0, last_seq=seq,
                                             finish_reason="stop"))
        print("ok", flush=True)
    await journal.close()

asyncio.run(main())
"""


class Producer:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, path: Path, stream_id: str) -> Producer:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", PRODUCER, str(path), stream_id,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        producer = cls(process)
        assert await producer.line() == "ready"
        return producer

    async def line(self) -> str:
        assert self.process.stdout is not None
        async with asyncio.timeout(60):  # a cold start imports everything
            return (await self.process.stdout.readline()).decode().strip()

    async def say(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command.encode() + b"\n")
        await self.process.stdin.drain()
        assert await self.line() == "ok"

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()


async def _take(follow: AsyncGenerator[list[FrameRecord], None], last: int) -> list[int]:
    """Seqs the follower yields until it has ``last``."""
    seqs: list[int] = []
    async with asyncio.timeout(BOUND_S):
        while not seqs or seqs[-1] < last:
            seqs += [frame.seq for frame in await anext(follow)]
    return seqs


async def test_the_live_tail_of_another_process_and_a_cancel_to_it(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    producer = await Producer.start(path, "s1")
    reader = SQLiteJournal(str(path))
    reader.orphan_check = 3600.0
    await reader.open()
    try:
        await producer.say("frames 2")
        follow = reader.follow("s1", 0)
        assert await _take(follow, 2) == [1, 2]
        await producer.say("frames 3")
        assert await _take(follow, 5) == [3, 4, 5]
        await producer.say("frames 1")
        assert await _take(follow, 6) == [6]
        assert await reader.request_cancel("s1")
        assert await producer.line() == "cancel s1"
        await producer.say("end")
        async with asyncio.timeout(BOUND_S):
            assert [batch async for batch in follow] == []
        record = await reader.get("s1")
        assert record is not None
        assert (record.state.status, record.state.last_seq, record.text) == (
            Status.COMPLETED, 6, "t1t2t3t4t5t6")
    finally:
        await producer.stop()
        await reader.close()


async def test_a_killed_producer_is_handed_to_on_orphan_at_once(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    producer = await Producer.start(path, "s2")
    reader = SQLiteJournal(str(path))
    reader.orphan_check = 3600.0
    await reader.open()
    orphans: list[str] = []

    async def settle(stream_id: str) -> None:
        orphans.append(stream_id)
        await reader.append(stream_id, [FrameRecord(3, "error", b"gone", "")],
                            StreamState(status=Status.INTERRUPTED, updated=time.time(),
                                        last_seq=3))

    reader.on_orphan = settle
    try:
        await producer.say("frames 2")
        follow = reader.follow("s2", 0)
        assert await _take(follow, 2) == [1, 2]
        await producer.stop()  # SIGKILL
        assert await _take(follow, 3) == [3]
        async with asyncio.timeout(BOUND_S):
            assert [batch async for batch in follow] == []
        assert orphans == ["s2"]
    finally:
        await producer.stop()
        await reader.close()
