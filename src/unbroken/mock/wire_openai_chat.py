"""OpenAI Chat Completions: ``data:``-only SSE chunks, then ``data: [DONE]``."""

from __future__ import annotations

from typing import Any

from ..dialects.openai_chat import OpenAIChatDialect
from .reply import PROMPT_TOKENS, TOOL_ARGUMENTS, TOOL_ARGUMENTS_PARTS, TOOL_NAME
from .wire import CREATED, Dialect, Framing, Plan, PlannedFrame, compact_json

__all__ = ["OPENAI_CHAT"]

FINISH_REASONS = {
    "stop": "stop",
    "length": "length",
    "content_filter": "content_filter",
    "tool_calls": "tool_calls",
}
SERVER_ERROR = {
    "message": "The server had an error while processing your request. Sorry about that!",
    "type": "server_error",
    "param": None,
    "code": "server_error",
}


def _chunk(plan: Plan, choices: list[dict[str, Any]], **extra: Any) -> PlannedFrame:
    body = {
        "id": f"chatcmpl-{plan.ident}",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": plan.model,
        "service_tier": "default",
        "system_fingerprint": "fp_mock",
        "choices": choices,
        **extra,
    }
    return PlannedFrame(data=compact_json(body))


def _choice(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}


def _usage(plan: Plan) -> dict[str, Any]:
    completion = len(plan.deltas)
    return {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": completion,
        "total_tokens": PROMPT_TOKENS + completion,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _tool_call_id(plan: Plan) -> str:
    return f"call_{plan.ident}"


def stream_frames(plan: Plan) -> list[PlannedFrame]:
    frames = [_chunk(plan, [_choice({"role": "assistant", "content": "", "refusal": None})])]
    frames += [_chunk(plan, [_choice({"content": delta})]) for delta in plan.deltas]
    if plan.finish == "tool_calls":
        start = {
            "index": 0,
            "id": _tool_call_id(plan),
            "type": "function",
            "function": {"name": TOOL_NAME, "arguments": ""},
        }
        frames.append(_chunk(plan, [_choice({"tool_calls": [start]})]))
        for part in TOOL_ARGUMENTS_PARTS:
            piece = {"index": 0, "function": {"arguments": part}}
            frames.append(_chunk(plan, [_choice({"tool_calls": [piece]})]))
    if plan.finish == "error":
        frames.append(error_frame(len(frames) + 1))
        return frames
    frames.append(_chunk(plan, [_choice({}, FINISH_REASONS[plan.finish])]))
    if plan.include_usage:
        frames.append(_chunk(plan, [], usage=_usage(plan)))
    frames.append(PlannedFrame(data=b"[DONE]"))
    return frames


def whole_body(plan: Plan) -> tuple[int, dict[str, Any]]:
    if plan.finish == "error":
        return 500, {"error": SERVER_ERROR}
    message: dict[str, Any] = {
        "role": "assistant",
        "content": plan.text,
        "refusal": None,
        "annotations": [],
    }
    if plan.finish == "tool_calls":
        message["tool_calls"] = [
            {
                "id": _tool_call_id(plan),
                "type": "function",
                "function": {"name": TOOL_NAME, "arguments": TOOL_ARGUMENTS},
            }
        ]
    return 200, {
        "id": f"chatcmpl-{plan.ident}",
        "object": "chat.completion",
        "created": CREATED,
        "model": plan.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": FINISH_REASONS[plan.finish],
            }
        ],
        "usage": _usage(plan),
        "service_tier": "default",
        "system_fingerprint": "fp_mock",
    }


def error_frame(position: int) -> PlannedFrame:
    return PlannedFrame(data=compact_json({"error": SERVER_ERROR}))


ERROR_TYPES = {
    400: ("invalid_request_error", None),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", None),
}


def error_body(status: int, message: str) -> dict[str, Any]:
    error_type, code = ERROR_TYPES.get(status, ("server_error", None))
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


OPENAI_CHAT = Dialect(
    name=OpenAIChatDialect.name,
    framing=Framing.SSE,
    media_type="text/event-stream; charset=utf-8",
    keepalive=b": keep-alive\n\n",
    dumps=compact_json,
    finishes=frozenset({"stop", "length", "content_filter", "tool_calls", "error"}),
    stream_frames=stream_frames,
    whole_body=whole_body,
    error_frame=error_frame,
    error_body=error_body,
)
