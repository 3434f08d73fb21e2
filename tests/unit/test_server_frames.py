"""``unbroken.server``: what each kind of value becomes, what is refused, and the limits."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from unbroken.errors import FrameLimitError, UnsupportedValueError
from unbroken.events import Finish, ToolCallDelta, Usage
from unbroken.finish import FinishReason, Status
from unbroken.framing import ServerSentEvent
from unbroken.server import ResumableStreams, StreamRefusedError
from unbroken.server.frames import encode_value, sse_bytes


@pytest.mark.parametrize(("value", "event", "data", "text"), [
    ("a\r\nb\u2713", "text", '"a\\r\\nb\u2713"', "a\r\nb\u2713"),
    ({"k": [1, None]}, None, '{"k":[1,null]}', ""),
    (ServerSentEvent(event="tick", data="x\ny"), "tick", "x\ny", ""),
    (ServerSentEvent(data="plain"), None, "plain", ""),
    (ToolCallDelta(seq=9, index=0, id="c1", name="f", arguments='{"a"'), "tool_call",
     '{"index":0,"id":"c1","name":"f","arguments":"{\\"a\\""}', ""),
    (Usage(seq=3, input_tokens=5), "usage",
     '{"input_tokens":5,"output_tokens":null,"total_tokens":null,"reasoning_tokens":null,'
     '"cached_tokens":null}', ""),
    (Finish(seq=4, status=Status.TRUNCATED, reason=FinishReason.LENGTH, raw="length"),
     "finish", '{"status":"truncated","reason":"length","raw":"length","final":true}', ""),
])
def test_each_kind_of_value(value: object, event: str | None, data: str, text: str) -> None:
    frame = encode_value(value, 7, 1.5, 1 << 20)
    assert (frame.seq, frame.event, frame.data.decode(), frame.text, frame.at) == (
        7, event, data, text, 1.5)


@pytest.mark.parametrize(("value", "type_name"), [
    (42, "int"), (b"bytes", "bytes"), (None, "NoneType"), (("a", "b"), "tuple"),
    (ServerSentEvent(event="end", data="{}"), "ServerSentEvent"),
    (ServerSentEvent(data="a\rb"), "ServerSentEvent"),
])
def test_unsupported_values_name_their_type(value: object, type_name: str) -> None:
    with pytest.raises(UnsupportedValueError) as caught:
        encode_value(value, 1, 0.0, 1 << 20)
    assert caught.value.type_name == type_name
    assert type_name in str(caught.value) or "SSE event" in str(caught.value)


def test_a_frame_over_the_size_limit_is_refused() -> None:
    assert encode_value("x" * 8, 1, 0.0, 10).data == b'"xxxxxxxx"'
    with pytest.raises(FrameLimitError) as caught:
        encode_value("x" * 9, 1, 0.0, 10)
    assert caught.value.limit == 10


def test_sse_bytes_carry_ids_and_split_lines() -> None:
    frames = [encode_value(ServerSentEvent(event="e", data="a\nb"), 1, 0.0, 100),
              encode_value({"x": 1}, 2, 0.0, 100)]
    assert sse_bytes("s1", frames, 1000) == (
        b"retry: 1000\nevent: e\nid: s1:1\ndata: a\ndata: b\n\nid: s1:2\ndata: {\"x\":1}\n\n")


async def _many(n: int) -> AsyncIterator[Any]:
    for i in range(n):
        yield f"v{i}"


def test_frame_count_limit_and_owner_limit() -> None:
    async def run() -> None:
        async with ResumableStreams("memory://", max_frames=5,
                                    max_streams_per_owner=1) as streams:
            handle = await streams.start(_many(10), owner="o")
            task = streams.producers[handle.stream_id].task
            assert task is not None
            with pytest.raises(StreamRefusedError) as refused:
                await streams.start(_many(1), owner="o")  # o's one slot is taken
            assert refused.value.status == 429
            await asyncio.wait_for(task, 10)
            got = await streams.get(handle.stream_id, owner="o")
            assert (got["status"], got["last_seq"], got["text"]) == ("failed", 5,
                                                                      "v0v1v2v3")
            assert got["error"] == {"type": "FrameLimitError", "message": (
                "unbroken.server: the source yielded more than max_frames (5) frames")}
            frames = await streams.journal.read_after(handle.stream_id, 0, 10)
            assert json.loads(frames[-1].data)["status"] == "failed"
            again = await streams.start(_many(1), owner="o")  # the slot came back
            assert again.created

    asyncio.run(run())


def test_retention_expired_and_purged_streams() -> None:
    """Past ``retention`` an ended stream is gone: 404, or 204 for its owner's EventSource
    (also once purged, by its tombstone); a stranger's EventSource still gets 404."""
    import time

    import httpx2

    async def run() -> None:
        async with ResumableStreams("memory://", retention=0.05) as streams:
            handle = await streams.start(_many(2), owner="o")
            task = streams.producers[handle.stream_id].task
            assert task is not None
            await asyncio.wait_for(task, 10)
            await asyncio.sleep(0.1)
            transport = httpx2.ASGITransport(app=streams.app)
            async with httpx2.AsyncClient(transport=transport, base_url="http://t") as client:
                path = f"/{handle.stream_id}/events"
                eventsource = {"accept": "text/event-stream"}
                token = {"token": handle.token or ""}
                assert (await client.get(path, params=token)).status_code == 404
                assert (await client.get(path, params=token,
                                         headers=eventsource)).status_code == 204
                assert await streams.journal.expire(time.time()) == 1  # purged
                assert (await client.get(path, params=token,
                                         headers=eventsource)).status_code == 204
                assert (await client.get(path, params={"token": "ubt_no"},
                                         headers=eventsource)).status_code == 404
                assert (await client.get(f"/{handle.stream_id}",
                                         params=token)).status_code == 404

    asyncio.run(run())


def test_start_refuses_bad_arguments_before_journaling_anything() -> None:
    async def run() -> None:
        streams = ResumableStreams("memory://")
        with pytest.raises(StreamRefusedError) as closed:
            await streams.start(_many(1), owner="o")  # not opened yet
        assert closed.value.status == 503
        async with streams:
            with pytest.raises(TypeError, match="not list"):
                await streams.start(["a", "b"], owner="o")
            for bad in ("", "a:b", "a/b", "x" * 129, "é"):
                with pytest.raises(ValueError, match="stream_id must match"):
                    await streams.start(_many(1), owner="o", stream_id=bad)
            page = await streams.journal.list_streams()
            assert list(page.streams) == []

    asyncio.run(run())
