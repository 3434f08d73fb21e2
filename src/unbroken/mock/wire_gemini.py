"""Gemini ``streamGenerateContent?alt=sse``: ``data:``-only SSE with CRLF line ends."""

from __future__ import annotations

import json
from typing import Any

from ..dialects.gemini import GeminiDialect
from .reply import PROMPT_TOKENS, TOOL_ARGUMENTS, TOOL_NAME
from .wire import Dialect, Framing, Plan, PlannedFrame, spaced_json

__all__ = ["GEMINI", "json_array_body"]

FINISH_REASONS = {
    "stop": "STOP",
    "tool_calls": "STOP",
    "length": "MAX_TOKENS",
    "content_filter": "SAFETY",
    "error": "MALFORMED_FUNCTION_CALL",
}
BLOCKED_RATING = {
    "category": "HARM_CATEGORY_DANGEROUS_CONTENT",
    "probability": "HIGH",
    "blocked": True,
}
STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
INTERNAL_MESSAGE = "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting"


def _usage(candidates_tokens: int) -> dict[str, int]:
    return {
        "promptTokenCount": PROMPT_TOKENS,
        "candidatesTokenCount": candidates_tokens,
        "totalTokenCount": PROMPT_TOKENS + candidates_tokens,
    }


def _chunk(plan: Plan, candidate: dict[str, Any], candidates_tokens: int) -> dict[str, Any]:
    return {
        "candidates": [candidate],
        "usageMetadata": _usage(candidates_tokens),
        "modelVersion": plan.model,
        "responseId": plan.ident,
    }


# Vertex AI's streamFunctionCallArguments: the call named, then one piece a frame (a string ends
# with an empty piece), then an empty functionCall with the finish reason.
STREAMED_CALL: tuple[dict[str, Any], ...] = (
    {"name": TOOL_NAME, "willContinue": True},
    {"partialArgs": [{"jsonPath": "$.city", "stringValue": "東京 ", "willContinue": True}],
     "willContinue": True},
    {"partialArgs": [{"jsonPath": "$.city", "stringValue": "🌧", "willContinue": True}],
     "willContinue": True},
    {"partialArgs": [{"jsonPath": "$.city", "stringValue": ""}], "willContinue": True},
    {"partialArgs": [{"jsonPath": "$.unit", "stringValue": "celsius", "willContinue": True}],
     "willContinue": True},
    {"partialArgs": [{"jsonPath": "$.unit", "stringValue": ""}], "willContinue": True},
)


def _final_candidate(plan: Plan, parts: list[dict[str, Any]]) -> dict[str, Any]:
    candidate: dict[str, Any] = {}
    if plan.finish not in ("content_filter", "error"):
        if plan.finish == "tool_calls" and plan.partial_args:
            parts = [*parts, {"functionCall": {}}]
        elif plan.finish == "tool_calls":
            parts = [*parts, {"functionCall": {"name": TOOL_NAME,
                                               "args": json.loads(TOOL_ARGUMENTS)}}]
        candidate["content"] = {"parts": parts, "role": "model"}
    candidate["finishReason"] = FINISH_REASONS[plan.finish]
    if plan.finish == "content_filter":
        candidate["safetyRatings"] = [BLOCKED_RATING]
    candidate["index"] = 0
    return candidate


def _chunks(plan: Plan) -> list[dict[str, Any]]:
    chunks = [
        _chunk(plan, {"content": {"parts": [{"text": delta}], "role": "model"}, "index": 0},
               number)
        for number, delta in enumerate(plan.deltas, start=1)
    ]
    if plan.finish == "tool_calls" and plan.partial_args:
        chunks += [
            _chunk(plan, {"content": {"parts": [{"functionCall": part}], "role": "model"},
                          "index": 0}, len(plan.deltas))
            for part in STREAMED_CALL
        ]
    parts = [] if plan.finish == "tool_calls" else [{"text": ""}]
    chunks.append(_chunk(plan, _final_candidate(plan, parts), len(plan.deltas)))
    return chunks


def stream_frames(plan: Plan) -> list[PlannedFrame]:
    return [PlannedFrame(data=spaced_json(chunk)) for chunk in _chunks(plan)]


def json_array_body(plan: Plan) -> bytes:
    """What ``streamGenerateContent`` without ``alt=sse`` sends: one JSON array of chunks."""
    return b"[" + b",\r\n".join(spaced_json(chunk) for chunk in _chunks(plan)) + b"]"


def whole_body(plan: Plan) -> tuple[int, dict[str, Any]]:
    return 200, _chunk(plan, _final_candidate(plan, [{"text": plan.text}]), len(plan.deltas))


def error_frame(position: int) -> PlannedFrame:
    return PlannedFrame(data=spaced_json(error_body(500, INTERNAL_MESSAGE)))


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message,
                      "status": STATUS_NAMES.get(status, "UNKNOWN")}}


GEMINI = Dialect(
    name=GeminiDialect.name,
    framing=Framing.SSE_CRLF,
    media_type="text/event-stream",
    keepalive=b": keep-alive\r\n\r\n",
    dumps=spaced_json,
    finishes=frozenset(FINISH_REASONS),
    partial_args=True,
    array_body=json_array_body,
    stream_frames=stream_frames,
    whole_body=whole_body,
    error_frame=error_frame,
    error_body=error_body,
)
