"""Fault injection, in process: frame damage, cut points, and the ASGI messages written."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from starlette.types import ASGIApp, Message

from unbroken.mock import create_app
from unbroken.mock.faults import apply_data_faults, character_cuts, first_cut
from unbroken.mock.reply import reply_deltas
from unbroken.mock.scenario import ScenarioError, parse_scenario
from unbroken.mock.wire import Plan, PlannedFrame
from unbroken.mock.wire_anthropic import ANTHROPIC
from unbroken.mock.wire_openai_chat import OPENAI_CHAT
from unbroken.mock.wire_openai_responses import OPENAI_RESPONSES


def _plan(tokens: int = 3) -> Plan:
    return Plan(model="m", ident="x", deltas=tuple(reply_deltas(0, tokens)), finish="stop")


@pytest.mark.parametrize(
    ("data", "cuts"),
    [
        (b"a\xc3\xa9b", [2]),
        ("a€€".encode(), [2, 6]),  # 3-byte characters: cut after byte 1, then after byte 2
        ("😀😀😀😀".encode(), [1, 6, 11, 13]),  # 4-byte: positions 1, 2, 3, 1 inside
        (b"abcd", [2]),
        (b"a", []),
        (b"\xff\xc3", [1]),  # no valid multi-byte character: the middle
    ],
)
def test_character_cuts(data: bytes, cuts: list[int]) -> None:
    assert character_cuts(data) == cuts


def test_first_cut_is_after_the_first_lead_byte() -> None:
    data = 'data: {"x":"ab你好"}\n\n'.encode()
    assert data[: first_cut(data)] == b'data: {"x":"ab\xe4'
    assert first_cut(b"data: [DONE]\n\n") == 7


def test_error_at_replaces_the_frame_and_ends_the_stream() -> None:
    frames = OPENAI_CHAT.stream_frames(_plan())
    damaged = apply_data_faults(frames, OPENAI_CHAT, parse_scenario("error_at=3"))
    assert damaged[:2] == frames[:2]
    assert len(damaged) == 3
    assert json.loads(damaged[2].data)["error"]["code"] == "server_error"


def test_responses_error_event_carries_the_frame_sequence_number() -> None:
    frames = OPENAI_RESPONSES.stream_frames(_plan())
    damaged = apply_data_faults(frames, OPENAI_RESPONSES, parse_scenario("error_at=6"))
    assert damaged[5].event == "error"
    assert json.loads(damaged[5].data) == {
        "type": "error",
        "sequence_number": 5,
        "code": "server_error",
        "message": "The server had an error processing your request. Sorry about that!",
        "param": None,
    }


def test_malformed_json_drops_the_closing_brace() -> None:
    frames = ANTHROPIC.stream_frames(_plan())
    damaged = apply_data_faults(frames, ANTHROPIC, parse_scenario("malformed_json_at=4"))
    assert damaged[3].data == frames[3].data[:-1]
    assert [frame for number, frame in enumerate(damaged) if number != 3] == frames[:3] + frames[4:]
    with pytest.raises(ValueError):
        json.loads(damaged[3].data)


def test_invalid_utf8_replaces_the_first_multibyte_character() -> None:
    frames = OPENAI_CHAT.stream_frames(_plan())
    damaged = apply_data_faults(frames, OPENAI_CHAT, parse_scenario("invalid_utf8_at=2"))
    delta = reply_deltas(0, 3)[0]  # "\t🇨🇳한국어 b": the first flag half becomes 0xFF
    assert delta.encode()[1:5] == "🇨".encode()
    assert damaged[1].data == frames[1].data.replace("🇨".encode(), b"\xff", 1)
    with pytest.raises(UnicodeDecodeError):
        damaged[1].data.decode()
    # A frame with no multi-byte character gets 0xFF before its last byte.
    done = apply_data_faults(frames, OPENAI_CHAT, parse_scenario("invalid_utf8_at=6"))
    assert done[5].data == b"[DONE\xff]"


def test_duplicate_inserts_a_copy_after_the_frame() -> None:
    frames = OPENAI_RESPONSES.stream_frames(_plan())
    damaged = apply_data_faults(frames, OPENAI_RESPONSES, parse_scenario("duplicate=5"))
    assert damaged == [*frames[:5], frames[4], *frames[5:]]
    numbers = [frame.sequence_number for frame in damaged]
    assert numbers[:7] == [0, 1, 2, 3, 4, 4, 5]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("error_at=7", "error_at"),  # chat with 3 tokens has 6 frames
        ("malformed_json_at=7", "malformed_json_at"),
        ("error_at=2; invalid_utf8_at=3", "invalid_utf8_at"),
        ("duplicate=1", "duplicate"),  # not openai-responses
    ],
)
def test_faults_out_of_range_are_scenario_errors(text: str, key: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        apply_data_faults(OPENAI_CHAT.stream_frames(_plan()), OPENAI_CHAT, parse_scenario(text))
    assert caught.value.key == key


async def _call(app: ASGIApp, path: str, body: dict[str, Any], scenario: str) -> list[Message]:
    sent: list[Message] = []
    delivered = False
    route, _, query = path.partition("?")

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}
        await asyncio.Event().wait()  # the client never disconnects
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": route,
        "raw_path": route.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"unbroken-mock", scenario.encode()), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    await app(scope, receive, send)
    return sent


def _bodies(messages: list[Message]) -> list[bytes]:
    return [message["body"] for message in messages if message["type"] == "http.response.body"]


def _frames(body: bytes, separator: bytes) -> list[tuple[int, int]]:
    """(start, end) of every frame in ``body``."""
    spans, start = [], 0
    while (found := body.find(separator, start)) != -1:
        spans.append((start, found + len(separator)))
        start = found + len(separator)
    assert start == len(body)
    return spans


@pytest.mark.parametrize(
    ("path", "separator"),
    [
        ("/v1/chat/completions", b"\n\n"),
        ("/v1/responses", b"\n\n"),
        ("/v1/messages", b"\n\n"),
        ("/v1beta/models/g:streamGenerateContent?alt=sse", b"\r\n\r\n"),
        ("/api/chat", b"\n"),
    ],
)
def test_split_utf8_writes_every_frame_in_pieces_cut_inside_characters(
    path: str, separator: bytes
) -> None:
    app = create_app()

    async def both() -> tuple[list[Message], list[Message]]:
        clean = await _call(app, path, {"stream": True}, "tokens=6")
        split = await _call(app, path, {"stream": True}, "tokens=6; split_utf8=1")
        return clean, split

    clean, split = asyncio.run(both())
    clean_body = b"".join(_bodies(clean))
    pieces = _bodies(split)
    assert b"".join(pieces) == clean_body
    assert split[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    write_ends, position = set(), 0
    for piece in pieces[:-1]:
        position += len(piece)
        write_ends.add(position)
    text_frames = 0
    for start, end in _frames(clean_body, separator):
        frame = clean_body[start:end]
        assert end in write_ends
        inner = sorted(offset for offset in write_ends if start < offset < end)
        multibyte = len(frame.decode()) < len(frame)
        if multibyte:
            # One cut inside each multi-byte character: the byte after the cut continues it.
            characters = sum(1 for char in frame.decode() if ord(char) > 0x7F)
            assert len(inner) == characters
            assert all(0x80 <= clean_body[offset] < 0xC0 for offset in inner)
            text_frames += 1
        else:
            assert inner == [start + len(frame) // 2]
    assert text_frames >= 6


def test_drop_after_leaves_out_the_final_message() -> None:
    messages = asyncio.run(
        _call(create_app(), "/v1/chat/completions", {"stream": True}, "tokens=3; drop_after=2")
    )
    assert messages[0]["type"] == "http.response.start"
    assert all(message.get("more_body") is True for message in messages[1:])
    assert len(_bodies(messages)) == 2


def test_a_client_hanging_up_during_a_stall_ends_the_handler() -> None:
    sent: list[Message] = []
    two_frames = asyncio.Event()
    calls = 0

    async def receive() -> Message:
        nonlocal calls
        calls += 1
        if calls == 1:
            return {"type": "http.request", "body": b'{"stream": true}', "more_body": False}
        await two_frames.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)
        if len(_bodies(sent)) == 2:
            two_frames.set()

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/v1/messages", "raw_path": b"/v1/messages",
        "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "headers": [(b"unbroken-mock", b"tokens=3; stall_after=2; stall_s=3600")],
    }
    # Without the disconnect this would sleep for an hour; the bound makes a hang a failure.
    asyncio.run(asyncio.wait_for(create_app()(scope, receive, send), timeout=10))
    assert len(_bodies(sent)) == 2
    assert all(message.get("more_body") is True for message in sent[1:])


def test_frame_values_compare_by_value() -> None:
    assert PlannedFrame(data=b"x", event="e") == PlannedFrame(data=b"x", event="e")
