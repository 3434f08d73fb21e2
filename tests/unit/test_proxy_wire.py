"""Downstream bytes: re-serialized frames, keep-alives, and the proxy's error frames."""

from __future__ import annotations

import pytest

from unbroken._receiver import StreamReceiver
from unbroken.errors import ProxyInterrupted
from unbroken.finish import Status
from unbroken.framing import SSEDecoder
from unbroken.proxy.wire import (
    KEEPALIVE_COMMENT,
    Downstream,
    downstream_for,
    error_body,
    error_frame,
    proxy_error_message,
)
from unbroken.resumption import ProxyMark
from unbroken.streams.journal import FrameRecord

DIALECTS = ("openai-chat", "openai-responses", "anthropic", "gemini", "ollama")


def test_sse_frames_carry_event_id_and_verbatim_data_lines() -> None:
    downstream = Downstream(media_type="text/event-stream", dialect="openai-chat", retry_ms=1500)
    frames = [
        FrameRecord(7, "content_block_delta", b'{"a":1}'),
        FrameRecord(8, None, b"line one\nline two"),
        FrameRecord(9, None, b""),
    ]
    assert downstream.frames("ub_x", frames, first=True) == (
        b"retry: 1500\nevent: content_block_delta\nid: ub_x:7\ndata: {\"a\":1}\n\n"
        b"id: ub_x:8\ndata: line one\ndata: line two\n\n"
        b"id: ub_x:9\ndata: \n\n"
    )
    # Only the first batch of a response carries the retry hint.
    assert downstream.frames("ub_x", frames[:1], first=False) == (
        b"event: content_block_delta\nid: ub_x:7\ndata: {\"a\":1}\n\n"
    )


def test_sse_frames_decode_back_to_the_upstream_events() -> None:
    downstream = Downstream(media_type="text/event-stream", dialect="openai-chat", retry_ms=1000)
    frames = [FrameRecord(1, "message_start", b'{"x":"\xe4\xbd\xa0"}'),
              FrameRecord(2, None, b"a\n\nb")]
    wire = downstream.frames("ub_s", frames, first=True) + KEEPALIVE_COMMENT
    wire += downstream.frames("ub_s", [FrameRecord(3, None, b"[DONE]")], first=False)
    decoder = SSEDecoder()
    events = decoder.receive_data(wire) + decoder.receive_eof()
    assert [(e.event, e.data, e.id, e.block_id) for e in events] == [
        ("message_start", '{"x":"你"}', "ub_s:1", "ub_s:1"),
        ("message", "a\n\nb", "ub_s:2", "ub_s:2"),
        ("message", "[DONE]", "ub_s:3", "ub_s:3"),
    ]
    assert decoder.reconnection_time == 1000


def test_keepalive_is_a_comment_line_without_a_blank_line() -> None:
    # A blank line after an id makes the OpenAI SDK dispatch an empty event it cannot parse.
    assert KEEPALIVE_COMMENT == b": keep-alive\n"
    assert b"\n\n" not in KEEPALIVE_COMMENT


def test_ndjson_frames_are_the_upstream_lines() -> None:
    downstream = downstream_for("ollama", "application/x-ndjson", events_endpoint=False,
                                retry_ms=1000)
    frames = [FrameRecord(1, None, b'{"a":1}'), FrameRecord(2, None, b'{"done":true}')]
    assert downstream.frames("ub_x", frames, first=True) == b'{"a":1}\n{"done":true}\n'
    assert downstream.keepalive is None


def test_gemini_post_has_data_lines_only() -> None:
    downstream = downstream_for("gemini", "text/event-stream", events_endpoint=False,
                                retry_ms=1000)
    wire = downstream.frames("ub_x", [FrameRecord(1, None, b'{"candidates":[]}')], first=True)
    assert wire == b'data: {"candidates":[]}\n\n'
    assert downstream.keepalive == b"\n"


@pytest.mark.parametrize("dialect", DIALECTS)
def test_events_endpoint_serves_every_dialect_with_ids(dialect: str) -> None:
    downstream = downstream_for(dialect, "whatever", events_endpoint=True, retry_ms=250)
    assert downstream.media_type == "text/event-stream; charset=utf-8"
    wire = downstream.frames("ub_x", [FrameRecord(4, None, b'{"done":true}')], first=True)
    assert wire == b'retry: 250\nid: ub_x:4\ndata: {"done":true}\n\n'


def mark(code: str = "c", status: str = "interrupted", resumable: bool = False,
         message: str = "m") -> ProxyMark:
    return ProxyMark(code=code, status=status, resumable=resumable, message=message)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_error_frame_interrupts_the_message_in_its_own_dialect(dialect: str) -> None:
    made = mark("upstream_interrupted", message="unbroken proxy: the upstream broke")
    frame = error_frame(dialect, 12, made, 30)
    assert frame.seq == 12
    if dialect == "ollama":
        wire = frame.data + b"\n"
    else:
        wire = downstream_for(dialect, "text/event-stream", events_endpoint=False,
                              retry_ms=None).frames("ub_x", [frame], first=True)
    receiver = StreamReceiver(dialect, trace=False)
    frames = receiver.receive_data(wire)
    assert receiver.finished  # the proxy's last frame ends the message at once
    assert [(f.committed, f.events) for f in frames] == [(True, [])]
    message = receiver.message
    assert message.status is Status.INTERRUPTED
    error = message.error
    assert isinstance(error, ProxyInterrupted)
    assert (error.code, error.status, str(error)) == (
        "upstream_interrupted", "interrupted", "unbroken proxy: the upstream broke")
    assert proxy_error_message(dialect, frame) == "unbroken proxy: the upstream broke"


def test_error_frames_exact_payloads() -> None:
    fields = b'{"code":"c","status":"interrupted","resumable":"false"}'
    assert error_frame("openai-chat", 3, mark()).data == (
        b'{"error":{"message":"m","type":"server_error","param":null,"code":"c","unbroken":'
        + fields + b'}}'
    )
    responses = error_frame("openai-responses", 3, mark(), 41)
    assert responses.event == "error"
    assert responses.data == (
        b'{"type":"error","code":"c","message":"m","param":null,"error":{"type":"server_error",'
        b'"code":"c","message":"m","param":null,"unbroken":' + fields
        + b'},"sequence_number":41}'
    )
    anthropic = error_frame("anthropic", 3, mark())
    assert (anthropic.event, anthropic.data) == (
        "error", b'{"type":"error","error":{"type":"api_error","message":"m","unbroken":'
        + fields + b'}}'
    )
    assert error_frame("gemini", 3, mark("stream_incomplete", "streaming", True)).data == (
        b'{"error":{"code":500,"message":"m","status":"INTERNAL","details":[{"@type":'
        b'"type.googleapis.com/google.rpc.ErrorInfo","reason":"STREAM_INCOMPLETE",'
        b'"domain":"unbroken","metadata":{"code":"stream_incomplete","status":"streaming",'
        b'"resumable":"true"}}]}}'
    )
    assert error_frame("ollama", 3, mark()).data == (
        b'{"error":"m [unbroken code=c; status=interrupted; resumable=false]"}')


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_providers_own_error_frame_is_not_the_proxys(dialect: str) -> None:
    own = FrameRecord(1, None, b'{"error":{"message":"unbroken proxy: a lie","type":"x"}}')
    assert proxy_error_message(dialect, own) is None


def test_error_bodies() -> None:
    assert error_body("anthropic", 404, "gone") == {
        "type": "error", "error": {"type": "not_found_error", "message": "gone"}
    }
    assert error_body("gemini", 502, "down") == {
        "error": {"code": 502, "message": "down", "status": "UNAVAILABLE"}
    }
    assert error_body("ollama", 502, "down") == {"error": "down"}
    assert error_body(None, 404, "gone") == {
        "error": {"message": "gone", "type": "invalid_request_error", "param": None,
                  "code": None}
    }
