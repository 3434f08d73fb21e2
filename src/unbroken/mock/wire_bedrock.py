"""AWS Bedrock ``ConverseStream`` and ``InvokeModelWithResponseStream``: JSON events in binary
AWS event-stream messages.

Each message carries ``:event-type``, ``:content-type`` and ``:message-type`` string headers and
the event's members as JSON, padded with a ``p`` member as Bedrock pads them (so that sizes do
not reveal the text). Text blocks start with their first delta; a tool call's block starts with
its id and name. ``messageStop`` carries the stop reason and ``metadata`` the usage, last.
InvokeModelWithResponseStream (Claude) sends each of Anthropic's events as a ``chunk`` message
whose JSON holds the event's bytes in base64.
"""

from __future__ import annotations

import base64
import json
import string
from typing import Any

from ..dialects.bedrock_converse import BedrockConverseDialect
from ..dialects.bedrock_invoke import BedrockInvokeDialect
from . import wire_anthropic
from .reply import PROMPT_TOKENS, TOOL_ARGUMENTS, TOOL_ARGUMENTS_PARTS, TOOL_NAME
from .wire import Dialect, Framing, Plan, PlannedFrame, compact_json

__all__ = ["BEDROCK_CONVERSE", "BEDROCK_INVOKE"]

STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "content_filter": "content_filtered",
    "tool_calls": "tool_use",
}
_PADDING = string.ascii_letters + string.digits


def _event(kind: str, **members: Any) -> PlannedFrame:
    padding = _PADDING[: 1 + len(compact_json(members)) % len(_PADDING)]
    return PlannedFrame(event=kind, data=compact_json({**members, "p": padding}))


def _tool_id(plan: Plan) -> str:
    return f"tooluse_{plan.ident}"


def _usage(plan: Plan) -> dict[str, int]:
    return {"inputTokens": PROMPT_TOKENS, "outputTokens": len(plan.deltas),
            "totalTokens": PROMPT_TOKENS + len(plan.deltas)}


def stream_frames(plan: Plan) -> list[PlannedFrame]:
    frames = [_event("messageStart", role="assistant")]
    frames += [_event("contentBlockDelta", contentBlockIndex=0, delta={"text": delta})
               for delta in plan.deltas]
    frames.append(_event("contentBlockStop", contentBlockIndex=0))
    if plan.finish == "tool_calls":
        start = {"toolUse": {"toolUseId": _tool_id(plan), "name": TOOL_NAME}}
        frames.append(_event("contentBlockStart", contentBlockIndex=1, start=start))
        frames += [_event("contentBlockDelta", contentBlockIndex=1,
                          delta={"toolUse": {"input": part}})
                   for part in TOOL_ARGUMENTS_PARTS]
        frames.append(_event("contentBlockStop", contentBlockIndex=1))
    if plan.finish == "error":
        frames.append(error_frame(len(frames) + 1))
        return frames
    frames.append(_event("messageStop", stopReason=STOP_REASONS[plan.finish]))
    frames.append(_event("metadata", usage=_usage(plan), metrics={"latencyMs": 100}))
    return frames


def whole_body(plan: Plan) -> tuple[int, dict[str, Any]]:
    if plan.finish == "error":
        return 424, {"message": "mock model stream error", "originalStatusCode": 500}
    content: list[dict[str, Any]] = [{"text": plan.text}]
    if plan.finish == "tool_calls":
        content.append({"toolUse": {"toolUseId": _tool_id(plan), "name": TOOL_NAME,
                                    "input": json.loads(TOOL_ARGUMENTS)}})
    return 200, {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": STOP_REASONS[plan.finish],
        "usage": _usage(plan),
        "metrics": {"latencyMs": 100},
    }


def error_frame(position: int) -> PlannedFrame:
    # What Bedrock sends when the model fails mid-stream: retryable.
    return PlannedFrame(event="modelStreamErrorException", exception=True,
                 data=compact_json({"message": "mock model stream error",
                                    "originalStatusCode": 500}))


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"message": message}


BEDROCK_CONVERSE = Dialect(
    name=BedrockConverseDialect.name,
    framing=Framing.EVENT_STREAM,
    media_type="application/vnd.amazon.eventstream",
    keepalive=b"",  # the event stream has no keep-alive message
    dumps=compact_json,
    finishes=frozenset({"stop", "length", "content_filter", "tool_calls", "error"}),
    stream_frames=stream_frames,
    whole_body=whole_body,
    error_frame=error_frame,
    error_body=error_body,
)


# -- InvokeModelWithResponseStream (Claude): Anthropic's events, base64, in chunk messages --------

INVOCATION_METRICS = "amazon-bedrock-invocationMetrics"


def _chunk(event: dict[str, Any]) -> PlannedFrame:
    encoded = base64.b64encode(compact_json(event)).decode()
    padding = _PADDING[: 1 + len(encoded) % len(_PADDING)]
    return PlannedFrame(event="chunk", data=compact_json({"bytes": encoded, "p": padding}))


def invoke_frames(plan: Plan) -> list[PlannedFrame]:
    # Bedrock sends Claude's events without Anthropic's pings, and the invocation's token counts
    # in the last one.
    events = [json.loads(frame.data) for frame in wire_anthropic.stream_frames(plan)
              if frame.event != "ping"]
    if plan.finish == "error":
        return [*map(_chunk, events[:-1]), error_frame(len(events))]
    events[-1][INVOCATION_METRICS] = {"inputTokenCount": PROMPT_TOKENS,
                                      "outputTokenCount": len(plan.deltas),
                                      "invocationLatency": 100, "firstByteLatency": 50}
    return [_chunk(event) for event in events]


def invoke_whole_body(plan: Plan) -> tuple[int, dict[str, Any]]:
    if plan.finish == "error":
        return 424, {"message": "mock model stream error", "originalStatusCode": 500}
    return wire_anthropic.whole_body(plan)


BEDROCK_INVOKE = Dialect(
    name=BedrockInvokeDialect.name,
    framing=Framing.EVENT_STREAM,
    media_type="application/vnd.amazon.eventstream",
    keepalive=b"",
    dumps=compact_json,
    finishes=frozenset({"stop", "length", "content_filter", "tool_calls", "error"}),
    stream_frames=invoke_frames,
    whole_body=invoke_whole_body,
    error_frame=error_frame,
    error_body=error_body,
)
