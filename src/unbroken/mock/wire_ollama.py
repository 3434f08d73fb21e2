"""Ollama ``/api/chat``: one JSON object per line (NDJSON), the last with ``done: true``."""

from __future__ import annotations

import json
from typing import Any

from .reply import PROMPT_TOKENS, TOOL_ARGUMENTS, TOOL_NAME
from .wire import Dialect, Frame, Framing, Plan, go_json

__all__ = ["OLLAMA"]

# Ollama has no content filter; asking the mock for one is a 400.
DONE_REASONS = {"stop": "stop", "length": "length", "tool_calls": "stop"}
RUNNER_ERROR = "an error was encountered while running the model: unexpected EOF"


def _created_at(number: int) -> str:
    return f"2025-01-01T00:00:00.{number:09d}Z"


def _line(plan: Plan, number: int, message: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": plan.model, "created_at": _created_at(number), "message": message, **extra}


def _done(plan: Plan, number: int, content: str,
          tool_calls: list[dict[str, Any]] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return _line(
        plan,
        number,
        message,
        done_reason=DONE_REASONS[plan.finish],
        done=True,
        total_duration=5_000_000,
        load_duration=1_000_000,
        prompt_eval_count=PROMPT_TOKENS,
        prompt_eval_duration=1_000_000,
        eval_count=len(plan.deltas),
        eval_duration=3_000_000,
    )


def _tool_calls() -> list[dict[str, Any]]:
    return [{"function": {"name": TOOL_NAME, "arguments": json.loads(TOOL_ARGUMENTS)}}]


def stream_frames(plan: Plan) -> list[Frame]:
    lines = [
        _line(plan, number, {"role": "assistant", "content": delta}, done=False)
        for number, delta in enumerate(plan.deltas, start=1)
    ]
    if plan.finish == "tool_calls":
        message = {"role": "assistant", "content": "", "tool_calls": _tool_calls()}
        lines.append(_line(plan, len(lines) + 1, message, done=False))
    frames = [Frame(data=go_json(line)) for line in lines]
    if plan.finish == "error":
        frames.append(error_frame(len(frames) + 1))
    else:
        frames.append(Frame(data=go_json(_done(plan, len(frames) + 1, "", None))))
    return frames


def whole_body(plan: Plan) -> tuple[int, dict[str, Any]]:
    if plan.finish == "error":
        return 500, error_body(500, RUNNER_ERROR)
    tool_calls = _tool_calls() if plan.finish == "tool_calls" else None
    return 200, _done(plan, 1, plan.text, tool_calls)


def error_frame(position: int) -> Frame:
    return Frame(data=go_json({"error": RUNNER_ERROR}))


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"error": message}


OLLAMA = Dialect(
    name="ollama",
    framing=Framing.NDJSON,
    media_type="application/x-ndjson",
    keepalive=b"",
    dumps=go_json,
    finishes=frozenset({"stop", "length", "tool_calls", "error"}),
    stream_frames=stream_frames,
    whole_body=whole_body,
    error_frame=error_frame,
    error_body=error_body,
)
