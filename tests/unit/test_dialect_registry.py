"""The dialect registry and dialect detection from a stream's first frame."""

from __future__ import annotations

import pytest

from unbroken.dialects import (
    DIALECT_NAMES,
    DIALECTS,
    DONE,
    PROVIDERS,
    detect_dialect,
    get_dialect,
    sniff_dialect,
)
from unbroken.framing import JSONLine, ServerSentEvent


def test_names() -> None:
    assert DIALECT_NAMES == (
        "openai-chat", "openai-responses", "anthropic", "gemini", "ollama", "bedrock-converse",
        "bedrock-invoke",
    )
    assert DIALECT_NAMES == tuple(cls.name for cls in DIALECTS)
    assert [provider.name for provider in PROVIDERS] == [
        "openai", "anthropic", "gemini", "ollama", "bedrock"
    ]


def test_a_body_is_told_by_its_first_byte_only_where_one_framing_starts_so() -> None:
    ollama = sniff_dialect(ord("{"))
    assert ollama is not None and ollama.name == "ollama"
    # Bedrock's two operations share the event stream: its first message tells them apart
    assert sniff_dialect(0) is None
    assert sniff_dialect(ord("d")) is None  # "data:": SSE, told by the first frame


@pytest.mark.parametrize(
    ("name", "framing", "media_type"),
    [
        ("openai-chat", "sse", "text/event-stream"),
        ("openai-responses", "sse", "text/event-stream"),
        ("anthropic", "sse", "text/event-stream"),
        ("gemini", "sse", "text/event-stream"),
        ("ollama", "ndjson", "application/x-ndjson"),
        ("bedrock-converse", "eventstream", "application/vnd.amazon.eventstream"),
        ("bedrock-invoke", "eventstream", "application/vnd.amazon.eventstream"),
    ],
)
def test_each_dialect(name: str, framing: str, media_type: str) -> None:
    first, second = get_dialect(name), get_dialect(name)
    assert first is not second  # one object per stream: they keep per-stream state
    assert (first.name, first.framing.name, first.media_type) == (name, framing, media_type)


@pytest.mark.parametrize("name", ["openai", "auto", "", "Anthropic"])
def test_unknown_name_lists_the_valid_ones(name: str) -> None:
    with pytest.raises(
        ValueError,
        match="openai-chat, openai-responses, anthropic, gemini, ollama, bedrock-converse, "
        "bedrock-invoke",
    ):
        get_dialect(name)


def test_done_sentinel_for_every_sse_dialect() -> None:
    frame = ServerSentEvent(event="message", data="[DONE]")
    for name in DIALECT_NAMES[:4]:
        assert get_dialect(name).load(frame) is DONE
    assert repr(DONE) == "DONE"


def ev(data: str, event: str = "message") -> ServerSentEvent:
    return ServerSentEvent(event=event, data=data)


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (ev('{"type": "message_start", "message": {}}', "message_start"), "anthropic"),
        (ev('{"type": "ping"}', "ping"), "anthropic"),
        (ev('{"type": "error", "error": {"type": "overloaded_error"}}', "error"), "anthropic"),
        (ev('{"type": "message_start", "message": {}}'), "anthropic"),
        (
            ev('{"type": "response.created", "sequence_number": 0}', "response.created"),
            "openai-responses",
        ),
        (ev('{"type": "error", "code": "x", "sequence_number": 3}', "error"), "openai-responses"),
        (ev('{"type": "response.created", "response": {}}'), "openai-responses"),
        (ev("[DONE]"), "openai-chat"),
        (
            ev('{"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": []}'),
            "openai-chat",
        ),
        (ev('{"object": "chat.completion.chunk"}'), "openai-chat"),
        (ev('{"error": {"message": "m", "type": "server_error", "code": null}}'), "openai-chat"),
        (ev('{"candidates": [{"content": {"parts": [{"text": "Hi"}]}}]}'), "gemini"),
        (ev('{"usageMetadata": {"promptTokenCount": 1}}'), "gemini"),
        (ev('{"error": {"code": 429, "message": "m", "status": "RESOURCE_EXHAUSTED"}}'), "gemini"),
        (ev('{"hello": "world"}'), None),
        (ev('{"type": "future"}'), None),
        (ev("not json"), None),
        (ev('"a string"'), None),
        (JSONLine(value={"model": "llama3.2", "done": False}, line=1, nbytes=40), "ollama"),
        (object(), None),
    ],
)
def test_detect_dialect(frame: object, expected: str | None) -> None:
    assert detect_dialect(frame) == expected
