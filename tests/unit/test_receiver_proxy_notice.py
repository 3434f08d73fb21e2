"""Frames an unbroken proxy writes itself, as the receiver reads them, in every dialect.

The proxy's frame is the dialect's error shape with the proxy's mark (``resumption.py``). A frame
that ends the stream (journaled, with its id) takes its seq and ends the message with the status
the proxy journaled: ``interrupted`` (``ProxyInterrupted``) with the exact prefix kept,
``cancelled`` or ``failed``, never the provider's ``failed``. A notice that only this response
ended early (``resumable``) takes no seq, fails nothing, and a resume after the last seq completes
the text exactly. A provider's own error, even one that says "unbroken proxy", stays ``failed``.
The provider frames are the mock's bytes; the proxy frames come from the dialects' own
``proxy_error``.
"""

from __future__ import annotations

import json

import pytest

from unbroken._receiver import StreamReceiver
from unbroken.dialects import get_dialect
from unbroken.errors import PayloadError, ProviderError, ProxyInterrupted
from unbroken.finish import FinishReason, Status
from unbroken.mock.wire import Framing, Plan, PlannedFrame, encode
from unbroken.mock.wire_anthropic import ANTHROPIC
from unbroken.mock.wire_bedrock import BEDROCK_CONVERSE
from unbroken.mock.wire_gemini import GEMINI
from unbroken.mock.wire_ollama import OLLAMA
from unbroken.mock.wire_openai_chat import OPENAI_CHAT
from unbroken.mock.wire_openai_responses import OPENAI_RESPONSES
from unbroken.resumption import ProxyMark, proxy_error
from unbroken.trace import IGNORED

MOCKS = {"openai-chat": OPENAI_CHAT, "openai-responses": OPENAI_RESPONSES,
         "anthropic": ANTHROPIC, "gemini": GEMINI, "ollama": OLLAMA,
         "bedrock-converse": BEDROCK_CONVERSE}
DELTAS = ("你好", "、世", "界")
# Gemini twice: the events endpoint (ids) and a POST for google-genai (no ids, frame n is seq n).
# Bedrock's body is binary event-stream messages, without ids like Ollama's NDJSON.
BODIES = ["openai-chat", "openai-responses", "anthropic", "gemini", "gemini-no-ids", "ollama",
          "bedrock-converse"]
ENDED = [("upstream_interrupted", "interrupted"), ("proxy_shutdown", "interrupted"),
         ("proxy_restarted", "interrupted")]


def dialect_of(body: str) -> str:
    return body.removesuffix("-no-ids")


def has_ids(body: str) -> bool:
    return body not in ("gemini-no-ids", "ollama", "bedrock-converse")


def provider_frames(body: str) -> tuple[list[PlannedFrame], int]:
    """The mock's frames of the reply, and how many of them carry the first two deltas (a
    binary framing's as the messages it writes)."""
    frames = MOCKS[dialect_of(body)].stream_frames(
        Plan(model="m", ident="r1", deltas=DELTAS, finish="stop"))
    if body == "bedrock-converse":
        frames = [PlannedFrame(event=None, data=encode(f, Framing.EVENT_STREAM)) for f in frames]
    second = next(n for n, f in enumerate(frames, 1) if DELTAS[1].encode() in f.data)
    return frames, second


def wire(body: str, frames: list[tuple[str | None, bytes]], first: int, *,
         ids: bool = True) -> bytes:
    """SSE blocks with the proxy's ids from ``first`` (no ids where the body has none), or
    NDJSON lines."""
    if body == "ollama":
        return b"".join(data + b"\n" for _event, data in frames)
    if body == "bedrock-converse":
        return b"".join(data for _event, data in frames)  # whole messages, as written
    out = []
    for n, (event, data) in enumerate(frames, first):
        head = f"id: ub_x:{n}\n" if ids and has_ids(body) else ""
        head += f"event: {event}\n" if event else ""
        out.append(head.encode() + b"data: " + data + b"\n\n")
    return b"".join(out)


def proxy_frame(body: str, mark: ProxyMark, provider_seq: int | None, *,
                resumable: str | None = None) -> tuple[str | None, bytes]:
    """The proxy's frame; ``resumable`` overwrites that field of the mark with a wrong value."""
    dialect = get_dialect(dialect_of(body))
    event, payload = proxy_error(dialect, mark, provider_seq)
    text = json.dumps(payload, ensure_ascii=False)
    if resumable is not None:
        text = text.replace('"resumable": "false"', f'"resumable": "{resumable}"').replace(
            "resumable=false", f"resumable={resumable}")
    if not dialect.framing.text:
        return event, dialect.frame_bytes(json.loads(text))
    return event, text.encode()


def receiver_for(body: str) -> StreamReceiver:
    receiver = StreamReceiver(dialect_of(body))
    if not has_ids(body):
        receiver.proxy_stream = "ub_x"  # the Unbroken-Stream-Id header, passed on by the client
    return receiver


def feed(receiver: StreamReceiver, data: bytes, step: int) -> list[tuple[int, bool]]:
    frames = [f for i in range(0, len(data), step)
              for f in receiver.receive_data(data[i : i + step], 0.5)]
    if not receiver.finished:
        frames += receiver.receive_eof(1.0)
    return [(f.seq, f.committed) for f in frames]


def responses_seq(body: str, head: int) -> int | None:
    # A Responses error continues the provider's sequence_number (from 0).
    return head if dialect_of(body) == "openai-responses" else None


@pytest.mark.parametrize("step", [1, 1000], ids=["byte-by-byte", "whole"])
@pytest.mark.parametrize(("code", "status"), ENDED)
@pytest.mark.parametrize("body", BODIES)
def test_a_frame_that_ends_the_stream_interrupts_it_with_the_exact_prefix(
    body: str, code: str, status: str, step: int
) -> None:
    frames, head = provider_frames(body)
    mark = ProxyMark(code=code, status=status, resumable=False,
                     message=f"unbroken proxy: {code}")
    data = wire(body, [(f.event, f.data) for f in frames[:head]]
                + [proxy_frame(body, mark, responses_seq(body, head))], 1)
    receiver = receiver_for(body)
    assert feed(receiver, data, step) == [(n, True) for n in range(1, head + 2)]
    message = receiver.message
    assert (message.status, message.text, message.last_seq, message.finish_reason) == (
        Status.INTERRUPTED, "你好、世", head + 1, None)
    error = message.error
    assert isinstance(error, ProxyInterrupted)
    assert (error.code, error.status, str(error)) == (code, status, f"unbroken proxy: {code}")
    assert [w.detail for w in message.warnings if w.code == "proxy_end"] == [
        f"the proxy ended the stream {status}: {code}: unbroken proxy: {code}"]


@pytest.mark.parametrize("body", BODIES)
def test_a_stream_the_proxy_journaled_cancelled_or_failed_ends_so(body: str) -> None:
    frames, head = provider_frames(body)
    for status, expected in (("cancelled", Status.CANCELLED), ("failed", Status.FAILED)):
        mark = ProxyMark(code="c", status=status, resumable=False, message="unbroken proxy: m")
        data = wire(body, [(f.event, f.data) for f in frames[:head]]
                    + [proxy_frame(body, mark, responses_seq(body, head))], 1)
        receiver = receiver_for(body)
        feed(receiver, data, 1000)
        message = receiver.message
        assert (message.status, message.text, message.last_seq) == (expected, "你好、世", head + 1)
        if expected is Status.FAILED:
            assert isinstance(message.error, PayloadError)  # the upstream's bytes, not its word
            assert str(message.error) == "unbroken proxy: m"
        else:
            assert message.error is None


@pytest.mark.parametrize("step", [1, 1000], ids=["byte-by-byte", "whole"])
@pytest.mark.parametrize(("code", "status"), [("stream_incomplete", "streaming"),
                                              ("stream_incomplete", "unknown"),
                                              ("proxy_restarted", "interrupted")])
@pytest.mark.parametrize("body", BODIES)
def test_a_notice_takes_no_seq_and_a_resume_completes_exactly(
    body: str, code: str, status: str, step: int
) -> None:
    frames, head = provider_frames(body)
    mark = ProxyMark(code=code, status=status, resumable=True, message="unbroken proxy: early")
    data = wire(body, [(f.event, f.data) for f in frames[:head]], 1) + wire(
        body, [proxy_frame(body, mark, None)], head + 1, ids=False)
    receiver = receiver_for(body)
    assert feed(receiver, data, step) == [(n, True) for n in range(1, head + 1)] + [(-1, False)]
    message = receiver.message
    assert (message.status, message.text, message.last_seq, message.error) == (
        Status.INTERRUPTED, "你好、世", head, None)
    assert [w.detail for w in message.warnings if w.code == "proxy_notice"] == [
        f"the proxy ended this response early: {code}: unbroken proxy: early"]
    assert [(row.seq, row.outcome) for row in message.trace.frames][-1] == (-1, IGNORED)
    # The resume after seq `head` gets the rest: nothing lost, nothing twice.
    after = head if not has_ids(body) else None
    resumed = receiver.reconnect(f"ub_x:{head}", position_after=after)
    feed(resumed, wire(body, [(f.event, f.data) for f in frames[head:]], head + 1), step)
    assert (message.status, message.finish_reason, message.text, message.last_seq) == (
        Status.COMPLETED, FinishReason.STOP, "你好、世界", len(frames))


@pytest.mark.parametrize("body", BODIES)
def test_a_providers_own_error_stays_failed(body: str) -> None:
    frames, head = provider_frames(body)
    own = MOCKS[dialect_of(body)].error_frame(head + 1)
    if body == "bedrock-converse":
        own = PlannedFrame(event=None, data=encode(own, Framing.EVENT_STREAM))
    receiver = receiver_for(body)
    feed(receiver, wire(body, [(f.event, f.data) for f in frames[:head]]
                        + [(own.event, own.data)], 1), 1000)
    message = receiver.message
    assert (message.status, message.text, message.last_seq) == (Status.FAILED, "你好、世", head + 1)
    assert isinstance(message.error, ProviderError)


@pytest.mark.parametrize("body", BODIES)
def test_a_mark_that_does_not_read_is_the_providers_error(body: str) -> None:
    # The right place, the wrong fields ("resumable" must be "true" or "false"): no guessing.
    frames, head = provider_frames(body)
    mark = ProxyMark(code="c", status="interrupted", resumable=False, message="unbroken proxy: m")
    event, data = proxy_frame(body, mark, responses_seq(body, head), resumable="maybe")
    receiver = receiver_for(body)
    feed(receiver, wire(body, [(f.event, f.data) for f in frames[:head]] + [(event, data)], 1),
         1000)
    assert receiver.message.status is Status.FAILED
    assert isinstance(receiver.message.error, ProviderError)


def test_a_notice_before_any_frame_interrupts_with_nothing_committed() -> None:
    # The journal failed at once: the response's first and only frame is the notice.
    mark = ProxyMark(code="stream_incomplete", status="streaming", resumable=True,
                     message="unbroken proxy: early")
    receiver = StreamReceiver("openai-chat")
    assert feed(receiver, wire("openai-chat", [proxy_frame("openai-chat", mark, None)], 1,
                               ids=False), 1000) == [(-1, False)]
    message = receiver.message
    assert (message.status, message.last_seq, message.error) == (Status.INTERRUPTED, -1, None)
