"""OpenAI Responses: named SSE events, each carrying ``sequence_number`` from 0, no ``[DONE]``."""

from __future__ import annotations

from typing import Any

from ..dialects.openai_responses import OpenAIResponsesDialect
from .reply import PROMPT_TOKENS, TOOL_ARGUMENTS, TOOL_ARGUMENTS_PARTS, TOOL_NAME
from .wire import CREATED, Dialect, Framing, Plan, PlannedFrame, compact_json

__all__ = ["OPENAI_RESPONSES", "response_object"]

SERVER_ERROR_MESSAGE = "The server had an error processing your request. Sorry about that!"
# finish -> (terminal event, response status, incomplete reason)
TERMINALS = {
    "stop": ("response.completed", "completed", None),
    "tool_calls": ("response.completed", "completed", None),
    "length": ("response.incomplete", "incomplete", "max_output_tokens"),
    "content_filter": ("response.incomplete", "incomplete", "content_filter"),
    "error": ("response.failed", "failed", None),
}


def _event(kind: str, sequence_number: int, **fields: Any) -> PlannedFrame:
    body = {"type": kind, "sequence_number": sequence_number, **fields}
    return PlannedFrame(event=kind, data=compact_json(body), sequence_number=sequence_number)


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def _message_item(plan: Plan, status: str, text: str | None) -> dict[str, Any]:
    content = [] if text is None else [_text_part(text)]
    return {
        "id": f"msg_{plan.ident}",
        "type": "message",
        "status": status,
        "content": content,
        "role": "assistant",
    }


def _call_item(plan: Plan, status: str, arguments: str) -> dict[str, Any]:
    return {
        "id": f"fc_{plan.ident}",
        "type": "function_call",
        "status": status,
        "arguments": arguments,
        "call_id": f"call_{plan.ident}",
        "name": TOOL_NAME,
    }


def response_object(plan: Plan, status: str, *, final: bool) -> dict[str, Any]:
    """The Response object; ``final`` adds output, usage and the finish details."""
    _, end_status, reason = TERMINALS[plan.finish]
    item_status = "incomplete" if end_status == "incomplete" else "completed"
    output: list[dict[str, Any]] = []
    if final:
        output.append(_message_item(plan, item_status, plan.text))
        if plan.finish == "tool_calls":
            output.append(_call_item(plan, "completed", TOOL_ARGUMENTS))
    error = None
    if final and plan.finish == "error":
        error = {"code": "server_error", "message": SERVER_ERROR_MESSAGE}
    completed = len(plan.deltas)
    usage = {
        "input_tokens": PROMPT_TOKENS,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": completed,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": PROMPT_TOKENS + completed,
    }
    return {
        "id": f"resp_{plan.ident}",
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "background": plan.background,
        "error": error,
        "incomplete_details": {"reason": reason} if final and reason else None,
        "instructions": None,
        "max_output_tokens": None,
        "model": plan.model,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage if final else None,
        "metadata": {},
    }


def stream_frames(plan: Plan) -> list[PlannedFrame]:
    terminal, end_status, _ = TERMINALS[plan.finish]
    item_status = "incomplete" if end_status == "incomplete" else "completed"
    item_id = f"msg_{plan.ident}"
    at = {"item_id": item_id, "output_index": 0, "content_index": 0}
    frames: list[PlannedFrame] = []

    def add(kind: str, **fields: Any) -> None:
        frames.append(_event(kind, len(frames), **fields))

    add("response.created", response=response_object(plan, "in_progress", final=False))
    add("response.in_progress", response=response_object(plan, "in_progress", final=False))
    add("response.output_item.added", output_index=0,
        item=_message_item(plan, "in_progress", None))
    add("response.content_part.added", **at, part=_text_part(""))
    for delta in plan.deltas:
        add("response.output_text.delta", **at, delta=delta, logprobs=[])
    add("response.output_text.done", **at, text=plan.text, logprobs=[])
    add("response.content_part.done", **at, part=_text_part(plan.text))
    add("response.output_item.done", output_index=0,
        item=_message_item(plan, item_status, plan.text))
    if plan.finish == "tool_calls":
        call = {"item_id": f"fc_{plan.ident}", "output_index": 1}
        add("response.output_item.added", output_index=1,
            item=_call_item(plan, "in_progress", ""))
        for part in TOOL_ARGUMENTS_PARTS:
            add("response.function_call_arguments.delta", **call, delta=part)
        add("response.function_call_arguments.done", **call, name=TOOL_NAME,
            arguments=TOOL_ARGUMENTS)
        add("response.output_item.done", output_index=1,
            item=_call_item(plan, "completed", TOOL_ARGUMENTS))
    add(terminal, response=response_object(plan, end_status, final=True))
    return frames


def whole_body(plan: Plan) -> tuple[int, dict[str, Any]]:
    return 200, response_object(plan, TERMINALS[plan.finish][1], final=True)


def error_frame(position: int) -> PlannedFrame:
    return _event("error", position - 1, code="server_error", message=SERVER_ERROR_MESSAGE,
                  param=None)


ERROR_TYPES = {
    400: ("invalid_request_error", None),
    404: ("invalid_request_error", None),
    429: ("requests", "rate_limit_exceeded"),
}


def error_body(status: int, message: str) -> dict[str, Any]:
    error_type, code = ERROR_TYPES.get(status, ("server_error", None))
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


OPENAI_RESPONSES = Dialect(
    name=OpenAIResponsesDialect.name,
    numbered=True,
    background=True,
    framing=Framing.SSE,
    media_type="text/event-stream; charset=utf-8",
    keepalive=b": keep-alive\n\n",
    dumps=compact_json,
    finishes=frozenset(TERMINALS),
    stream_frames=stream_frames,
    whole_body=whole_body,
    error_frame=error_frame,
    error_body=error_body,
)
