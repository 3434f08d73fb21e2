"""Shared stream bodies for the parse, receiver and SDK tests (no tests here), and chunkings."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

DONE = b"data: [DONE]\n\n"


def sse(data: Any, *, event: str | None = None, id: str | None = None) -> bytes:
    """One SSE event; ``data`` is JSON-encoded unless it is already text."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    head = (f"event: {event}\n" if event else "") + (f"id: {id}\n" if id is not None else "")
    return (head + f"data: {text}\n\n").encode()


def chat(content: str | None = None, finish: str | None = None, **delta: Any) -> dict[str, Any]:
    """An OpenAI chat completion chunk for choice 0."""
    if content is not None:
        delta["content"] = content
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def chat_body(*parts: str, finish: str | None = "stop", done: bool = True) -> bytes:
    body = b"".join(sse(chat(part)) for part in parts)
    if finish is not None:
        body += sse(chat(finish=finish))
    return body + (DONE if done else b"")


def anthropic_body(text_parts: list[str], stop_reason: str = "end_turn") -> bytes:
    events: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "claude-sonnet-4-5",
                    "stop_reason": None,
                    "usage": {"input_tokens": 25, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        ("ping", {"type": "ping"}),
    ]
    for part in text_parts:
        delta = {"type": "text_delta", "text": part}
        events.append(
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        )
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": 15},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return b"".join(sse(data, event=name) for name, data in events)


def responses_body(text_parts: list[str]) -> bytes:
    events: list[dict[str, Any]] = [
        {
            "type": "response.created",
            "response": {"id": "resp_1", "model": "gpt-4.1", "status": "in_progress"},
        }
    ]
    for part in text_parts:
        events.append(
            {
                "type": "response.output_text.delta",
                "item_id": "msg_1",
                "output_index": 0,
                "content_index": 0,
                "delta": part,
            }
        )
    events.append(
        {
            "type": "response.completed",
            "response": {
                "id": "resp_1",
                "status": "completed",
                "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
            },
        }
    )
    return b"".join(
        sse({**event, "sequence_number": n}, event=event["type"]) for n, event in enumerate(events)
    )


def gemini_body(text_parts: list[str], finish: str = "STOP") -> bytes:
    chunks: list[dict[str, Any]] = [
        {
            "candidates": [{"content": {"parts": [{"text": part}], "role": "model"}, "index": 0}],
            "modelVersion": "gemini-2.5-flash",
        }
        for part in text_parts
    ]
    chunks.append(
        {
            "candidates": [
                {"content": {"parts": [], "role": "model"}, "finishReason": finish, "index": 0}
            ],
            "usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 2},
            "modelVersion": "gemini-2.5-flash",
        }
    )
    return b"".join(sse(chunk) for chunk in chunks)


def ollama_body(text_parts: list[str], done_reason: str = "stop") -> bytes:
    lines = [
        {
            "model": "llama3.2",
            "created_at": "2025-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": part},
            "done": False,
        }
        for part in text_parts
    ]
    lines.append(
        {
            "model": "llama3.2",
            "created_at": "2025-01-01T00:00:01Z",
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": done_reason,
            "prompt_eval_count": 7,
            "eval_count": 2,
        }
    )
    return b"".join(json.dumps(line, ensure_ascii=False).encode() + b"\n" for line in lines)


def chunkings(body: bytes) -> Iterator[list[bytes]]:
    """Whole, one byte at a time, and split in two at every position."""
    yield [body]
    yield [body[i : i + 1] for i in range(len(body))]
    for cut in range(1, len(body)):
        yield [body[:cut], body[cut:]]
