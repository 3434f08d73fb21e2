"""An unbroken proxy's unnumbered error frame (``stream_incomplete``; a stream its owner may yet
continue) is a notice that the response ended early, not a frame of the stream: it takes no seq,
fails nothing, and the message ends ``interrupted``, resumable with ``Last-Event-ID``."""

from __future__ import annotations

import json

import pytest

from unbroken.errors import ProviderError
from unbroken.finish import FinishReason, Status
from unbroken.receiver import StreamReceiver
from unbroken.trace import IGNORED


def chunk(text: str, finish: str | None = None) -> str:
    return json.dumps({"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [
        {"index": 0, "delta": {"content": text} if text else {}, "finish_reason": finish}]})


NOTICE = json.dumps({"error": {"message": "unbroken proxy: this response ended before stream "
                                          "ub_x did (after seq 2)", "type": "server_error",
                               "param": None, "code": "stream_incomplete"}})


def numbered(first: int, datas: list[str]) -> str:
    return "".join(f"id: ub_x:{n}\ndata: {d}\n\n" for n, d in enumerate(datas, first))


@pytest.mark.parametrize("step", [1, 7, 1000])
def test_the_notice_interrupts_and_a_resume_completes_exactly(step: int) -> None:
    body = (numbered(1, [chunk("你好"), chunk("、世")]) + f"data: {NOTICE}\n\n").encode()
    receiver = StreamReceiver("openai-chat")
    frames = [f for i in range(0, len(body), step) for f in receiver.receive_data(
        body[i : i + step], 0.5)]
    frames += receiver.receive_eof(1.0)
    assert [(f.seq, f.committed) for f in frames] == [(1, True), (2, True), (-1, False)]
    message = receiver.message
    assert (message.status, message.text, message.last_seq, message.error) == (
        Status.INTERRUPTED, "你好、世", 2, None)
    assert [w.code for w in message.warnings] == ["proxy_notice", "no_finish_reason"]
    assert message.warnings[0].detail == (
        "the proxy ended this response early: stream_incomplete: unbroken proxy: this response "
        "ended before stream ub_x did (after seq 2)")
    assert [(row.seq, row.outcome) for row in message.trace.frames] == [
        (1, "committed"), (2, "committed"), (-1, IGNORED)]
    # The resume with Last-Event-ID ub_x:2 gets seq 3 on: nothing lost, nothing twice.
    resumed = receiver.reconnect("ub_x:2")
    tail = numbered(3, [chunk("界"), chunk("", "stop"), "[DONE]"]).encode()
    resumed.receive_data(tail, 2.0)
    resumed.receive_eof(2.1)
    assert (message.status, message.finish_reason, message.text, message.last_seq) == (
        Status.COMPLETED, FinishReason.STOP, "你好、世界", 5)


@pytest.mark.parametrize("error_block", [
    f"id: ub_x:2\ndata: {NOTICE}\n\n",  # numbered: a journaled frame of the stream
    f"data: {NOTICE}\n\n",  # unnumbered, in a stream without proxy ids
], ids=["numbered-in-a-proxy-stream", "unnumbered-without-proxy-ids"])
def test_other_error_frames_still_fail_the_stream(error_block: str) -> None:
    first = numbered(1, [chunk("a")]) if "id:" in error_block else f"data: {chunk('a')}\n\n"
    receiver = StreamReceiver("openai-chat")
    receiver.receive_data((first + error_block).encode())
    receiver.receive_eof()
    message = receiver.message
    assert (message.status, message.last_seq, message.text) == (Status.FAILED, 2, "a")
    assert isinstance(message.error, ProviderError)


def test_a_notice_before_any_frame_counts_when_the_response_named_a_proxy_stream() -> None:
    # No numbered frame yet (the journal failed at once): the response's Unbroken-Stream-Id
    # header, which the client passes on, says whose notice this is.
    receiver = StreamReceiver("openai-chat")
    receiver.proxy_stream = "ub_x"
    frames = receiver.receive_data(f"data: {NOTICE}\n\n".encode())
    receiver.receive_eof()
    assert [(f.seq, f.committed) for f in frames] == [(-1, False)]
    message = receiver.message
    assert (message.status, message.last_seq, message.error) == (Status.INTERRUPTED, -1, None)
    # Without the header it is the provider's error, as from any server.
    plain = StreamReceiver("openai-chat")
    plain.receive_data(f"data: {NOTICE}\n\n".encode())
    plain.receive_eof()
    assert plain.message.status is Status.FAILED


def gemini_chunk(text: str, finish: str | None = None) -> str:
    candidate: dict[str, object] = {"content": {"role": "model", "parts": [{"text": text}]},
                                    "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    return json.dumps({"candidates": [candidate]})


def gemini_error(reason: str | None, domain: str = "unbroken") -> str:
    error: dict[str, object] = {"code": 500, "message": "unbroken proxy: ended early",
                                "status": "INTERNAL"}
    if reason is not None:
        error["details"] = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                             "reason": reason, "domain": domain}]
    return json.dumps({"error": error})


def unnumbered(datas: list[str]) -> bytes:
    return "".join(f"data: {d}\n\n" for d in datas).encode()


@pytest.mark.parametrize("before", [[], ["你好"], ["你好", "、世"]],
                         ids=["first-frame", "after-one", "after-two"])
def test_a_gemini_body_without_ids_knows_the_proxys_notice_by_its_error_info(
    before: list[str],
) -> None:
    # A Gemini POST through the proxy carries no ids (google-genai fails on them): frame n is
    # seq n, and the proxy's notice is marked by an ErrorInfo of domain "unbroken".
    receiver = StreamReceiver("gemini")
    receiver.proxy_stream = "ub_x"
    body = unnumbered([gemini_chunk(t) for t in before] + [gemini_error("STREAM_INCOMPLETE")])
    frames = receiver.receive_data(body, 0.5)
    frames += receiver.receive_eof(1.0)
    count = len(before)
    assert [(f.seq, f.committed) for f in frames] == [
        (n, True) for n in range(1, count + 1)] + [(-1, False)]
    message = receiver.message
    assert (message.status, message.text, message.last_seq, message.error) == (
        Status.INTERRUPTED, "".join(before), count if count else -1, None)
    assert [w.code for w in message.warnings] == ["proxy_notice", "no_finish_reason"]
    assert message.warnings[0].detail == (
        "the proxy ended this response early: INTERNAL: unbroken proxy: ended early")
    # The client resumes the same POST after position `count`; the positions continue.
    resumed = receiver.reconnect(f"ub_x:{count}", position_after=count)
    rest = ["你好", "、世", "界"][count:]
    resumed.receive_data(unnumbered([gemini_chunk(t) for t in rest[:-1]]
                                    + [gemini_chunk(rest[-1], "STOP")]), 2.0)
    resumed.receive_eof(2.1)
    assert (message.status, message.finish_reason, message.text, message.last_seq) == (
        Status.COMPLETED, FinishReason.STOP, "你好、世界", 3)


@pytest.mark.parametrize(("reason", "domain", "proxy_stream"), [
    ("STREAM_INCOMPLETE", "unbroken", None),  # not through a proxy: the provider's error
    (None, "unbroken", "ub_x"),  # a plain Gemini error, through the proxy
    ("PROXY_RESTARTED", "unbroken", "ub_x"),  # journaled by the proxy: a frame of the stream
    ("STREAM_INCOMPLETE", "googleapis.com", "ub_x"),  # another domain's reason
], ids=["no-proxy", "no-details", "journaled-reason", "other-domain"])
def test_other_gemini_errors_still_fail_the_stream(
    reason: str | None, domain: str, proxy_stream: str | None
) -> None:
    receiver = StreamReceiver("gemini")
    receiver.proxy_stream = proxy_stream
    receiver.receive_data(unnumbered([gemini_chunk("a"), gemini_error(reason, domain)]))
    receiver.receive_eof()
    message = receiver.message
    assert (message.status, message.last_seq, message.text) == (Status.FAILED, 2, "a")
    assert isinstance(message.error, ProviderError)
    assert message.error.event.type == "INTERNAL"
