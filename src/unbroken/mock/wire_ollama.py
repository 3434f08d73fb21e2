"""Ollama ``/api/chat`` and ``/api/generate``: one JSON object per line (NDJSON), the last with
``done: true``.

Both endpoints write the same stream: text lines, then a done line with the reason and counts, or
an ``{"error": ...}`` line. They differ only in where a line holds its text (``message.content``
or top-level ``response``) and in their field order, which follows Ollama's Go structs
(``api.ChatResponse`` puts ``done_reason`` before ``done``, ``api.GenerateResponse`` after it,
followed by ``context``). ``/api/generate`` takes no tools, so it cannot end in tool calls.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..dialects.ollama import OllamaDialect
from .reply import PROMPT_TOKENS, TOOL_ARGUMENTS, TOOL_NAME
from .wire import Dialect, Framing, Plan, PlannedFrame, go_json

__all__ = ["GENERATE_CONTEXT", "OLLAMA", "OLLAMA_GENERATE"]

# Ollama has no content filter; asking the mock for one is a 400.
DONE_REASONS = {"stop": "stop", "length": "length", "tool_calls": "stop"}
RUNNER_ERROR = "an error was encountered while running the model: unexpected EOF"
# The token ids /api/generate returns as ``context`` on its done line (the mock's own).
GENERATE_CONTEXT = (1, 2, 3)

# (plan, line number, text, done fields) -> one line of the endpoint
LineWriter = Callable[[Plan, int, str, dict[str, Any]], dict[str, Any]]


def _created_at(number: int) -> str:
    return f"2025-01-01T00:00:00.{number:09d}Z"


def _metrics(plan: Plan) -> dict[str, Any]:
    return {
        "total_duration": 5_000_000,
        "load_duration": 1_000_000,
        "prompt_eval_count": PROMPT_TOKENS,
        "prompt_eval_duration": 1_000_000,
        "eval_count": len(plan.deltas),
        "eval_duration": 3_000_000,
    }


def _tool_calls() -> list[dict[str, Any]]:
    return [{"function": {"name": TOOL_NAME, "arguments": json.loads(TOOL_ARGUMENTS)}}]


def _chat_line(plan: Plan, number: int, text: str, done: dict[str, Any],
               tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    line = {"model": plan.model, "created_at": _created_at(number), "message": message}
    if not done:
        return {**line, "done": False}
    return {**line, "done_reason": done["done_reason"], "done": True, **_metrics(plan)}


def _generate_line(plan: Plan, number: int, text: str, done: dict[str, Any]) -> dict[str, Any]:
    line = {"model": plan.model, "created_at": _created_at(number), "response": text}
    if not done:
        return {**line, "done": False}
    return {**line, "done": True, "done_reason": done["done_reason"],
            "context": list(GENERATE_CONTEXT), **_metrics(plan)}


def _stream_frames(plan: Plan, write: LineWriter) -> list[PlannedFrame]:
    lines = [write(plan, number, delta, {}) for number, delta in enumerate(plan.deltas, start=1)]
    if plan.finish == "tool_calls":  # chat only: the generate dialect refuses this finish
        lines.append(_chat_line(plan, len(lines) + 1, "", {}, _tool_calls()))
    frames = [PlannedFrame(data=go_json(line)) for line in lines]
    if plan.finish == "error":
        frames.append(error_frame(len(frames) + 1))
    else:
        done = {"done_reason": DONE_REASONS[plan.finish]}
        frames.append(PlannedFrame(data=go_json(write(plan, len(frames) + 1, "", done))))
    return frames


def _whole_body(plan: Plan, write: LineWriter) -> tuple[int, dict[str, Any]]:
    if plan.finish == "error":
        return 500, error_body(500, RUNNER_ERROR)
    done = {"done_reason": DONE_REASONS[plan.finish]}
    if plan.finish == "tool_calls":
        return 200, _chat_line(plan, 1, plan.text, done, _tool_calls())
    return 200, write(plan, 1, plan.text, done)


def chat_stream_frames(plan: Plan) -> list[PlannedFrame]:
    return _stream_frames(plan, _chat_line)


def chat_whole_body(plan: Plan) -> tuple[int, dict[str, Any]]:
    return _whole_body(plan, _chat_line)


def generate_stream_frames(plan: Plan) -> list[PlannedFrame]:
    return _stream_frames(plan, _generate_line)


def generate_whole_body(plan: Plan) -> tuple[int, dict[str, Any]]:
    return _whole_body(plan, _generate_line)


def error_frame(position: int) -> PlannedFrame:
    return PlannedFrame(data=go_json({"error": RUNNER_ERROR}))


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"error": message}


OLLAMA = Dialect(
    name=OllamaDialect.name,
    framing=Framing.NDJSON,
    media_type="application/x-ndjson",
    keepalive=b"",
    dumps=go_json,
    finishes=frozenset({"stop", "length", "tool_calls", "error"}),
    stream_frames=chat_stream_frames,
    whole_body=chat_whole_body,
    error_frame=error_frame,
    error_body=error_body,
)

OLLAMA_GENERATE = Dialect(
    name="ollama /api/generate",
    framing=Framing.NDJSON,
    media_type="application/x-ndjson",
    keepalive=b"",
    dumps=go_json,
    finishes=frozenset({"stop", "length", "error"}),
    stream_frames=generate_stream_frames,
    whole_body=generate_whole_body,
    error_frame=error_frame,
    error_body=error_body,
)
