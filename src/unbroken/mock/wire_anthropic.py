"""Anthropic Messages: named SSE events (``event:`` line + JSON with the same ``type``)."""

from __future__ import annotations

import json
from typing import Any

from ..dialects.anthropic import AnthropicDialect
from .reply import PROMPT_TOKENS, TOOL_ARGUMENTS, TOOL_ARGUMENTS_PARTS, TOOL_NAME
from .wire import Dialect, Framing, Plan, PlannedFrame, compact_json

__all__ = ["ANTHROPIC"]

STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "content_filter": "refusal",
    "tool_calls": "tool_use",
}
OVERLOADED = {"type": "overloaded_error", "message": "Overloaded"}


def _event(kind: str, **fields: Any) -> PlannedFrame:
    return PlannedFrame(event=kind, data=compact_json({"type": kind, **fields}))


def _tool_id(plan: Plan) -> str:
    return f"toolu_{plan.ident}"


def _message(plan: Plan, content: list[dict[str, Any]], stop_reason: str | None,
             output_tokens: int) -> dict[str, Any]:
    return {
        "id": f"msg_{plan.ident}",
        "type": "message",
        "role": "assistant",
        "model": plan.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": PROMPT_TOKENS,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": output_tokens,
            "service_tier": "standard",
        },
    }


def stream_frames(plan: Plan) -> list[PlannedFrame]:
    frames = [
        _event("message_start", message=_message(plan, [], None, 1)),
        _event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        # The real API sends one ping right after the first block starts.
        PlannedFrame(event="ping", data=b'{"type": "ping"}'),
    ]
    frames += [
        _event("content_block_delta", index=0, delta={"type": "text_delta", "text": delta})
        for delta in plan.deltas
    ]
    frames.append(_event("content_block_stop", index=0))
    if plan.finish == "tool_calls":
        block = {"type": "tool_use", "id": _tool_id(plan), "name": TOOL_NAME, "input": {}}
        frames.append(_event("content_block_start", index=1, content_block=block))
        for part in TOOL_ARGUMENTS_PARTS:
            delta = {"type": "input_json_delta", "partial_json": part}
            frames.append(_event("content_block_delta", index=1, delta=delta))
        frames.append(_event("content_block_stop", index=1))
    if plan.finish == "error":
        frames.append(error_frame(len(frames) + 1))
        return frames
    frames.append(
        _event(
            "message_delta",
            delta={"stop_reason": STOP_REASONS[plan.finish], "stop_sequence": None},
            usage={"output_tokens": len(plan.deltas)},
        )
    )
    frames.append(_event("message_stop"))
    return frames


def whole_body(plan: Plan) -> tuple[int, dict[str, Any]]:
    if plan.finish == "error":
        return 529, {"type": "error", "error": OVERLOADED}
    content: list[dict[str, Any]] = [{"type": "text", "text": plan.text}]
    if plan.finish == "tool_calls":
        content.append({
            "type": "tool_use",
            "id": _tool_id(plan),
            "name": TOOL_NAME,
            "input": json.loads(TOOL_ARGUMENTS),
        })
    return 200, _message(plan, content, STOP_REASONS[plan.finish], len(plan.deltas))


def error_frame(position: int) -> PlannedFrame:
    return _event("error", error=OVERLOADED)


ERROR_TYPES = {
    400: "invalid_request_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
}


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"),
                                       "message": message}}


ANTHROPIC = Dialect(
    name=AnthropicDialect.name,
    framing=Framing.SSE,
    media_type="text/event-stream; charset=utf-8",
    keepalive=b'event: ping\ndata: {"type": "ping"}\n\n',
    dumps=compact_json,
    finishes=frozenset({"stop", "length", "content_filter", "tool_calls", "error"}),
    stream_frames=stream_frames,
    whole_body=whole_body,
    error_frame=error_frame,
    error_body=error_body,
)
