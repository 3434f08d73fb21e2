"""``proxy/evidence.py``: a journaled stream as a capture, from a real ``MemoryJournal`` and a
real SQLite file, read back by the capture loader (the proxy in front of the mock is in
``tests/integration/test_proxy_evidence.py``)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from unbroken.client.capture import CANCELLED, parse_capture, replay_capture
from unbroken.finish import Status
from unbroken.proxy.evidence import capture_lines
from unbroken.proxy.wire import error_frame
from unbroken.resumption import ProxyMark
from unbroken.streams.journal import (
    FrameRecord,
    Journal,
    MemoryJournal,
    SQLiteJournal,
    StreamMeta,
    StreamRecord,
    StreamState,
)
from unbroken.streams.journal.base import FOLLOW_BATCH

pytestmark = pytest.mark.anyio

CREATED = 1_718_000_000.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class CountingJournal(MemoryJournal):
    """A memory journal that remembers every storage read the export makes."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[int, int, int]] = []  # (after, limit, frames returned)

    async def read_after(self, stream_id: str, seq: int, limit: int) -> list[FrameRecord]:
        found = await super().read_after(stream_id, seq, limit)
        self.reads.append((seq, limit, len(found)))
        return found


def meta(dialect: str = "openai-chat") -> StreamMeta:
    return StreamMeta(stream_id="ub_0123456789abcdef01234567", dialect=dialect, created=CREATED,
                      media_type="text/event-stream; charset=utf-8", token_hash="t" * 64,
                      credential_hash="c" * 64, request_path="/v1/chat/completions",
                      response_headers=(("x-request-id", "req_7"),))


def chunk(seq: int, text: str, finish: str | None = None) -> FrameRecord:
    payload = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    return FrameRecord(seq, None, json.dumps(payload).encode(), text, CREATED + seq / 100)


async def exported(journal: Journal, stream_id: str) -> list[dict[str, Any]]:
    record = await journal.get(stream_id, with_text=False)
    assert record is not None
    body = b"".join([part async for part in capture_lines(journal, record)])
    return [json.loads(line) for line in body.splitlines()]


def ended(status: Status, last_seq: int, **fields: Any) -> StreamState:
    return StreamState(status=status, updated=CREATED + 60, last_seq=last_seq, **fields)


async def test_a_long_stream_is_read_in_batches_and_every_frame_is_one_read() -> None:
    journal = CountingJournal()
    await journal.open()
    count = 2 * FOLLOW_BATCH + 3
    await journal.create(meta(), StreamState(status=Status.STREAMING, updated=CREATED))
    frames = [chunk(seq, f"w{seq} ") for seq in range(1, count)]
    frames.append(chunk(count, "", "stop"))
    await journal.append(meta().stream_id, frames,
                         ended(Status.COMPLETED, count, finish_reason="stop"))
    records = await exported(journal, meta().stream_id)
    assert records[0] == {"unbroken_capture": 1, "method": "POST", "url": "/v1/chat/completions",
                          "dialect": "openai-chat", "started": CREATED,
                          "source": "unbroken-proxy-journal",
                          "stream_id": "ub_0123456789abcdef01234567"}
    assert records[1] == {"connection": 1, "kind": "first", "status": 200, "headers": {
        "x-request-id": "req_7", "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-cache", "x-accel-buffering": "no",
        "unbroken-stream-id": "ub_0123456789abcdef01234567"}}
    reads = records[2:-1]
    assert [read["seq"] for read in reads] == list(range(1, count + 1))
    assert [read["t"] for read in reads[:3]] == [0.01, 0.02, 0.03]
    assert base64.b64decode(reads[0]["b"]) == b"data: " + frames[0].data + b"\n\n"
    assert records[-1] == {"end": "eof", "status": "completed", "finish_reason": "stop",
                           "last_seq": count, "usage": None,
                           "usage_missing": "the upstream reported no usage"}
    # Never more than one batch at a time: full batches, the rest, then one empty read before
    # and one after the end state was seen.
    assert journal.reads == [(0, FOLLOW_BATCH, FOLLOW_BATCH),
                             (FOLLOW_BATCH, FOLLOW_BATCH, FOLLOW_BATCH),
                             (2 * FOLLOW_BATCH, FOLLOW_BATCH, 3),
                             (count, FOLLOW_BATCH, 0), (count, FOLLOW_BATCH, 0)]
    capture = parse_capture([json.dumps(r) for r in records], "export")
    message = replay_capture(capture)
    assert (message.status, message.last_seq) == (Status.COMPLETED, count)
    assert message.text == "".join(f"w{seq} " for seq in range(1, count))


async def test_the_proxys_error_frame_is_the_end_record_and_the_replay_is_interrupted() -> None:
    journal = MemoryJournal()
    await journal.open()
    stream_id = meta().stream_id
    await journal.create(meta(), StreamState(status=Status.STREAMING, updated=CREATED))
    made = error_frame("openai-chat", 3, ended_mark(
        "upstream_interrupted", "unbroken proxy: the upstream stream broke before it finished"))
    await journal.append(stream_id, [chunk(1, "Hel"), chunk(2, "lo, wor"), made],
                         ended(Status.INTERRUPTED, 3,
                               error={"type": "TransportError", "message": "broke"}))
    records = await exported(journal, stream_id)
    assert [r.get("seq") for r in records[2:-1]] == [1, 2]
    end = records[-1]
    assert end.pop("proxy_frame") == {
        "seq": 3, "t": round(made.at - CREATED, 6),
        "b": base64.b64encode(b"data: " + made.data + b"\n\n").decode()}
    assert end == {"end": "error",
                   "error": "unbroken proxy: the upstream stream broke before it finished",
                   "status": "interrupted", "finish_reason": None, "last_seq": 3,
                   "usage": None, "usage_missing": "the stream ended interrupted before the "
                                                   "upstream reported usage"}
    message = replay_capture(parse_capture([json.dumps(r) for r in records], "export"))
    assert (message.status, message.text, message.last_seq) == (
        Status.INTERRUPTED, "Hello, wor", 2)
    assert str(message.error) == "unbroken proxy: the upstream stream broke before it finished"


async def test_a_cancelled_stream_replays_cancelled() -> None:
    journal = MemoryJournal()
    await journal.open()
    stream_id = meta("anthropic").stream_id
    await journal.create(meta("anthropic"), StreamState(status=Status.STREAMING, updated=0.0))
    delta = FrameRecord(1, "content_block_delta",
                        b'{"type":"content_block_delta","index":0,'
                        b'"delta":{"type":"text_delta","text":"Hi"}}', "Hi", CREATED + 0.5)
    made = error_frame("anthropic", 2,
                       ended_mark("stream_cancelled", "unbroken proxy: the stream was cancelled"))
    await journal.append(stream_id, [delta, made], ended(Status.CANCELLED, 2))
    records = await exported(journal, stream_id)
    assert base64.b64decode(records[2]["b"]) == (
        b"event: content_block_delta\ndata: " + delta.data + b"\n\n")
    assert (records[-1]["end"], records[-1]["error"]) == ("error", CANCELLED)
    message = replay_capture(parse_capture([json.dumps(r) for r in records], "export"))
    assert (message.status, message.text) == (Status.CANCELLED, "Hi")


async def test_a_live_stream_ends_live_and_replays_streaming() -> None:
    journal = MemoryJournal()
    await journal.open()
    stream_id = meta().stream_id
    await journal.create(meta(), StreamState(status=Status.STREAMING, updated=CREATED))
    await journal.append(stream_id, [chunk(1, "half a sen")],
                         StreamState(status=Status.STREAMING, updated=CREATED, last_seq=1))
    records = await exported(journal, stream_id)
    assert records[-1] == {"end": "live", "status": "streaming", "last_seq": 1, "usage": None}
    message = replay_capture(parse_capture([json.dumps(r) for r in records], "export"))
    assert (message.status, message.text, message.last_seq) == (
        Status.STREAMING, "half a sen", 1)


async def test_an_interrupted_stream_without_a_proxy_frame_ends_with_its_error() -> None:
    """A re-attachable Responses stream whose producer died: no error frame was journaled."""
    journal = MemoryJournal()
    await journal.open()
    stream_id = meta().stream_id
    await journal.create(meta(), StreamState(status=Status.STREAMING, updated=CREATED))
    await journal.append(stream_id, [chunk(1, "ab")], ended(
        Status.INTERRUPTED, 1, error={"type": "reattachable", "message": "producer stopped"}))
    records = await exported(journal, stream_id)
    assert [r.get("seq") for r in records[2:-1]] == [1]
    assert records[-1] == {"end": "error", "error": "producer stopped", "status": "interrupted",
                           "finish_reason": None, "last_seq": 1, "usage": None,
                           "usage_missing": "the stream ended interrupted before the upstream "
                                            "reported usage"}


async def test_frames_of_an_upgraded_sqlite_file_are_marked_untimed(tmp_path: Path) -> None:
    journal = SQLiteJournal(str(tmp_path / "j.db"))
    await journal.open()
    try:
        stream_id = meta("ollama").stream_id
        await journal.create(meta("ollama"), StreamState(status=Status.STREAMING,
                                                         updated=CREATED))
        lines = [b'{"message":{"role":"assistant","content":"a"},"done":false}',
                 b'{"message":{"role":"assistant","content":"b"},"done":false}',
                 b'{"message":{"role":"assistant","content":""},"done":true,'
                 b'"done_reason":"stop"}']
        await journal.append(stream_id, [FrameRecord(1, None, lines[0], "a"),
                                         FrameRecord(2, None, lines[1], "b", CREATED + 2.5),
                                         FrameRecord(3, None, lines[2])],
                             ended(Status.COMPLETED, 3, finish_reason="stop"))
        records = await exported(journal, stream_id)
    finally:
        await journal.close()
    assert [(r["t"], r.get("untimed"), base64.b64decode(r["b"])) for r in records[2:-1]] == [
        (0.0, True, lines[0] + b"\n"), (2.5, None, lines[1] + b"\n"),
        (2.5, True, lines[2] + b"\n")]
    message = replay_capture(parse_capture([json.dumps(r) for r in records], "export"))
    assert (message.status, message.text) == (Status.COMPLETED, "ab")


async def test_a_stream_purged_during_the_export_ends_with_an_error() -> None:
    journal = MemoryJournal()
    await journal.open()
    stream_id = meta().stream_id
    await journal.create(meta(), StreamState(status=Status.STREAMING, updated=CREATED))
    await journal.append(stream_id, [chunk(1, "x")], ended(Status.COMPLETED, 1))
    record = await journal.get(stream_id, with_text=False)
    assert isinstance(record, StreamRecord)
    lines = capture_lines(journal, record)
    parts = [await anext(lines), await anext(lines)]  # header, connection
    assert await journal.expire(CREATED + 61) == 1
    parts += [part async for part in lines]
    records = [json.loads(line) for line in b"".join(parts).splitlines()]
    assert [r.get("seq") for r in records[2:-1]] == []
    assert records[-1] == {"end": "error",
                           "error": "the stream left the journal (expired) while it was exported"}


def ended_mark(code: str, message: str) -> ProxyMark:
    """The mark of a frame the proxy journaled to end a stream."""
    status = "cancelled" if code == "stream_cancelled" else "interrupted"
    return ProxyMark(code=code, status=status, resumable=False, message=message)
