"""The proxy's view of Bedrock, all read from the dialect: its routes, its framing on the way
out, and the exception message that ends a response the proxy had to cut short."""

from __future__ import annotations

import json

import pytest

from unbroken import parse
from unbroken.dialects import get_dialect
from unbroken.errors import ProviderError, ProxyInterrupted
from unbroken.finish import Status
from unbroken.framing import EVENT_STREAM, EventStreamDecoder, encode_message
from unbroken.proxy.routing import Endpoint, endpoint_for, wants_stream
from unbroken.proxy.wire import downstream_for, error_frame, proxy_error_message
from unbroken.resumption import ProxyMark, proxy_mark
from unbroken.streams.journal import FrameRecord

STREAM = Endpoint(provider="bedrock", dialect="bedrock-converse")


def test_routes() -> None:
    path = "/model/anthropic.claude-3-haiku-20240307-v1:0/converse-stream"
    assert endpoint_for("POST", path, {}) == STREAM
    assert wants_stream(STREAM, b"", {}) is True  # the path alone asks for the stream
    assert STREAM.streams_as("application/vnd.amazon.eventstream") is True
    assert STREAM.streams_as("application/json") is False
    # the provider's other operations pass through to its origin
    assert endpoint_for("POST", "/model/m/converse", {}) == Endpoint(provider="bedrock")
    assert endpoint_for("GET", "/model/m/converse-stream", {}) == Endpoint(provider="bedrock")
    assert endpoint_for("POST", "/models", {}) == Endpoint(provider="openai")


def test_a_binary_framing_goes_out_as_journaled_on_every_route() -> None:
    frames = [FrameRecord(1, None, b"\x00\x01", "", 0.0), FrameRecord(2, None, b"\x02", "", 0.0)]
    for events_endpoint in (False, True):
        out = downstream_for("bedrock-converse", "application/vnd.amazon.eventstream",
                             events_endpoint=events_endpoint, retry_ms=1000)
        assert (out.framing, out.ids, out.keepalive) == (EVENT_STREAM, False, None)
        assert out.media_type == "application/vnd.amazon.eventstream"
        assert out.frames("ub_x", frames, first=True) == b"\x00\x01\x02"


def test_the_proxys_exception_message_ends_the_message_as_the_proxy_journaled() -> None:
    mark = ProxyMark(code="upstream_interrupted", status="interrupted", resumable=False,
                     message="unbroken proxy: the upstream broke")
    frame = error_frame("bedrock-converse", 5, mark)
    [decoded] = EventStreamDecoder().receive_data(frame.data)
    # What the service sends for a stream it cannot finish; boto3 raises EventStreamError.
    assert decoded.headers == {":exception-type": "internalServerException",
                               ":content-type": "application/json",
                               ":message-type": "exception"}
    # botocore keeps only "message": the mark ends it too, and a reader strips it again
    assert json.loads(decoded.payload) == {
        "message": "unbroken proxy: the upstream broke [unbroken: code=upstream_interrupted, "
                   "status=interrupted, resumable=false]",
        "reason": "upstream_interrupted",
        "unbroken": {"code": "upstream_interrupted", "status": "interrupted",
                     "resumable": "false"}}
    assert proxy_error_message("bedrock-converse", frame) == "unbroken proxy: the upstream broke"
    message = parse([frame.data], dialect="bedrock-converse")
    assert message.status is Status.INTERRUPTED
    assert isinstance(message.error, ProxyInterrupted)
    assert (message.error.code, message.error.status, str(message.error)) == (
        "upstream_interrupted", "interrupted", "unbroken proxy: the upstream broke")


def test_the_services_own_exception_fails_the_message_as_retryable() -> None:
    data = encode_message({":exception-type": "internalServerException",
                           ":content-type": "application/json", ":message-type": "exception"},
                          b'{"message":"unbroken proxy: not ours, no mark"}')
    message = parse([data], dialect="bedrock-converse")
    assert message.status is Status.FAILED
    assert isinstance(message.error, ProviderError)
    assert (message.error.event.type, message.error.retryable) == ("internalServerException", True)
    assert message.error.event.message == "unbroken proxy: not ours, no mark"


INVOKE = Endpoint(provider="bedrock", dialect="bedrock-invoke")


def test_invoke_model_with_response_stream_routes_to_its_own_dialect() -> None:
    path = "/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke-with-response-stream"
    assert endpoint_for("POST", path, {}) == INVOKE
    assert wants_stream(INVOKE, b'{"anthropic_version": "bedrock-2023-05-31"}', {}) is True
    assert INVOKE.streams_as("application/vnd.amazon.eventstream") is True
    assert INVOKE.streams_as("application/json") is False
    # InvokeModel itself answers whole: the provider's, passed through
    assert endpoint_for("POST", "/model/m/invoke", {}) == Endpoint(provider="bedrock")
    assert endpoint_for("GET", "/model/m/invoke-with-response-stream", {}) == Endpoint(
        provider="bedrock")
    # Converse is still Converse
    assert endpoint_for("POST", "/model/m/converse-stream", {}) == STREAM


def test_invokes_cut_response_ends_with_the_same_exception_message() -> None:
    mark = ProxyMark(code="upstream_interrupted", status="interrupted", resumable=False,
                     message="unbroken proxy: the upstream broke")
    frame = error_frame("bedrock-invoke", 5, mark)
    assert frame.data == error_frame("bedrock-converse", 5, mark).data
    assert proxy_error_message("bedrock-invoke", frame) == "unbroken proxy: the upstream broke"
    message = parse([frame.data], dialect="bedrock-invoke")
    assert message.status is Status.INTERRUPTED
    assert isinstance(message.error, ProxyInterrupted)


@pytest.mark.parametrize("name", ["bedrock-converse", "bedrock-invoke"])
def test_the_mark_is_read_from_the_message_alone(name: str) -> None:
    """What boto3's ``EventStreamError`` keeps of the proxy's exception, its message: the mark
    at its end is read back (``from_bedrock`` ends the message as the proxy journaled), and the
    message comes back without it. A provider's own message, another domain's mark, or a mark
    whose fields ``ProxyMark`` refuses, is none."""
    dialect = get_dialect(name)
    said = ("unbroken proxy: cut [x] [unbroken: code=proxy_shutdown, status=interrupted, "
            "resumable=true]")
    assert proxy_mark(dialect, {"message": said}) == ProxyMark(
        code="proxy_shutdown", status="interrupted", resumable=True,
        message="unbroken proxy: cut [x]")
    for other in ("Too many requests [unbroken]", said.replace("[unbroken:", "[other:"),
                  said + " ", said.replace("resumable=true", "resumable=maybe"),
                  said.replace("code=proxy_shutdown, ", "")):
        assert proxy_mark(dialect, {"message": other}) is None, other
    assert proxy_mark(dialect, {"message": 7}) is None
