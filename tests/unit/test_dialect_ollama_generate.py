"""Ollama ``/api/generate`` NDJSON through ``parse(dialect="ollama")``: exact wire lines.

The golden outcomes come from Ollama's API reference (docs/api.md, "Generate a completion"): the
text is the concatenation of ``response``, ``thinking`` is kept apart, the last line has
``done: true``, the counts and ``done_reason`` (``context`` is an opaque list of token ids). The
first body is the documented streaming example; the others change one thing each.
"""

from __future__ import annotations

import pytest

from unbroken import FinishReason, Status, parse
from unbroken.errors import ProviderError
from unbroken.events import Usage

# docs/api.md streaming example, one object per line as the server writes them (Go's
# encoding/json: compact, fields in struct order).
LINE_THE = (b'{"model":"llama3.2","created_at":"2023-08-04T08:52:19.385406455-07:00",'
            b'"response":"The","done":false}\n')
LINE_SKY = (b'{"model":"llama3.2","created_at":"2023-08-04T08:52:19.385406455-07:00",'
            b'"response":" sky \\u003cis\\u003e blue \xe2\x80\x94 \xf0\x9f\x8c\x8d",'
            b'"done":false}\n')


def done_line(reason: bytes | None) -> bytes:
    reason_field = b'' if reason is None else b'"done_reason":"' + reason + b'",'
    return (b'{"model":"llama3.2","created_at":"2023-08-04T19:22:45.499127Z","response":"",'
            b'"done":true,' + reason_field + b'"context":[1,2,3],"total_duration":10706818083,'
            b'"load_duration":6338219291,"prompt_eval_count":26,"prompt_eval_duration":130079000,'
            b'"eval_count":259,"eval_duration":4232710000}\n')


TEXT = "The sky <is> blue \u2014 \U0001f30d"
USAGE = (26, 259)


def every_split(body: bytes) -> list[list[bytes]]:
    """The body whole, one byte at a time, and cut once at every position."""
    splits = [[body], [body[i : i + 1] for i in range(len(body))]]
    splits += [[body[:cut], body[cut:]] for cut in range(1, len(body))]
    return splits


@pytest.mark.parametrize(
    ("reason", "status", "finish"),
    [
        (b"stop", Status.COMPLETED, FinishReason.STOP),
        (b"length", Status.TRUNCATED, FinishReason.LENGTH),
        (b"load", Status.COMPLETED, FinishReason.OTHER),
        (b"a_reason_from_2030", Status.COMPLETED, FinishReason.OTHER),
    ],
)
def test_done_reason_is_normalized_and_kept_raw(
    reason: bytes, status: Status, finish: FinishReason
) -> None:
    body = LINE_THE + LINE_SKY + done_line(reason)
    for chunks in every_split(body):
        message = parse(chunks, dialect="ollama")
        assert (message.text, message.reasoning) == (TEXT, "")
        assert (message.status, message.finish_reason) == (status, finish)
        assert message.raw_finish_reason == reason.decode()
        assert message.usage is not None
        assert (message.usage.input_tokens, message.usage.output_tokens) == USAGE
        assert (message.last_seq, message.error, message.duplicates) == (3, None, 0)


def test_the_documented_done_line_without_a_reason_is_interrupted() -> None:
    """The docs' final object has no done_reason (older servers; a runner that lost its
    connection): text and counts are kept, but nothing says it finished."""
    message = parse(LINE_THE + LINE_SKY + done_line(None), dialect="ollama")
    assert message.text == TEXT
    assert (message.status, message.finish_reason, message.raw_finish_reason) == (
        Status.INTERRUPTED, None, None
    )
    assert message.usage == Usage(seq=3, input_tokens=26, output_tokens=259)


def test_thinking_lines_are_reasoning_not_text() -> None:
    body = (
        b'{"model":"qwen3","created_at":"2025-08-15T22:55:08.1Z","response":"",'
        b'"thinking":"Let me","done":false}\n'
        b'{"model":"qwen3","created_at":"2025-08-15T22:55:08.2Z","response":"",'
        b'"thinking":" think \xe5\x97\xaf","done":false}\n'
        b'{"model":"qwen3","created_at":"2025-08-15T22:55:08.3Z","response":"Hi \xc3\xa9",'
        b'"done":false}\n'
        + done_line(b"stop")
    )
    for chunks in every_split(body):
        message = parse(chunks, dialect="ollama")
        assert (message.reasoning, message.text) == ("Let me think \u55ef", "Hi \u00e9")
        assert (message.status, message.finish_reason) == (Status.COMPLETED, FinishReason.STOP)
        assert message.last_seq == 4


def test_an_error_line_mid_stream_fails_and_keeps_the_prefix() -> None:
    body = LINE_THE + b'{"error":"an error was encountered while running the model"}\n'
    message = parse(body, dialect="ollama")
    assert message.text == "The"
    assert (message.status, message.finish_reason) == (Status.FAILED, FinishReason.ERROR)
    assert isinstance(message.error, ProviderError)
    assert (message.error.event.message, message.error.retryable) == (
        "an error was encountered while running the model", False
    )


def test_a_body_cut_before_the_done_line_is_interrupted() -> None:
    cut = LINE_THE + LINE_SKY[:-9]  # inside the last line, no LF
    message = parse(cut, dialect="ollama")
    assert message.text == "The"
    assert (message.status, message.finish_reason, message.usage) == (
        Status.INTERRUPTED, None, None
    )


def test_the_whole_non_streamed_object_is_one_line() -> None:
    """``"stream": false`` answers one object (no trailing LF): the same verdict."""
    body = (b'{"model":"llama3.2","created_at":"2023-08-04T19:22:45.499127Z",'
            b'"response":"The sky is blue because it is the color of the sky.","done":true,'
            b'"done_reason":"stop","context":[1,2,3],"total_duration":5043500667,'
            b'"load_duration":5025959,"prompt_eval_count":26,"prompt_eval_duration":325953000,'
            b'"eval_count":290,"eval_duration":4709213000}')
    message = parse(body, dialect="ollama")
    assert message.text == "The sky is blue because it is the color of the sky."
    assert (message.status, message.finish_reason) == (Status.COMPLETED, FinishReason.STOP)
    assert message.usage == Usage(seq=1, input_tokens=26, output_tokens=290)
