"""OpenAI Responses streaming (``POST /v1/responses`` with ``"stream": true``).

Semantic events, each named by ``event:`` and by the data's ``type``, each with a
``sequence_number`` counting from 0 (the stream's own seq source). The end is one of
``response.completed``, ``response.incomplete`` (``incomplete_details.reason``) or
``response.failed``; an ``error`` event may come instead. There is no ``[DONE]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ..events import (
    ErrorEvent,
    Event,
    Finish,
    ReasoningDelta,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    UnknownEvent,
    Usage,
)
from ..finish import FinishReason, Status
from . import genai_messages as genai
from .base import DONE, PASS, SSEDialect, count, error_event, finish, marked_error
from .openai_chat import OPENAI
from .routes import Route

__all__ = [
    "COMPLETED_WITH_TOOL_CALLS",
    "EVENT_TYPES",
    "FINISH_REASONS",
    "RETRYABLE_ERRORS",
    "TOOL_CALL_ITEMS",
    "OpenAIResponsesDialect",
]

EVENT_TYPES: Final[Mapping[str, str]] = {
    "response.created": "created",
    "response.in_progress": "created",
    "response.queued": "created",
    "response.completed": "completed",
    "response.incomplete": "incomplete",
    "response.failed": "failed",
    "error": "error",
    "response.output_item.added": "item_added",
    "response.output_item.done": PASS,
    "response.content_part.added": PASS,
    "response.content_part.done": PASS,
    "response.output_text.delta": "text_delta",
    "response.output_text.done": PASS,
    "response.output_text.annotation.added": PASS,
    "response.refusal.delta": PASS,
    "response.refusal.done": PASS,
    "response.function_call_arguments.delta": "arguments_delta",
    "response.function_call_arguments.done": PASS,
    "response.custom_tool_call_input.delta": "arguments_delta",
    "response.custom_tool_call_input.done": PASS,
    "response.reasoning_summary_part.added": PASS,
    "response.reasoning_summary_part.done": PASS,
    "response.reasoning_summary_text.delta": "reasoning_delta",
    "response.reasoning_summary_text.done": PASS,
    "response.reasoning_text.delta": "reasoning_delta",
    "response.reasoning_text.done": PASS,
    "response.audio.delta": PASS,
    "response.audio.done": PASS,
    "response.audio.transcript.delta": PASS,
    "response.audio.transcript.done": PASS,
    "response.code_interpreter_call_code.delta": PASS,
    "response.code_interpreter_call_code.done": PASS,
    "response.code_interpreter_call.in_progress": PASS,
    "response.code_interpreter_call.interpreting": PASS,
    "response.code_interpreter_call.completed": PASS,
    "response.compaction.compacting": PASS,
    "response.file_search_call.in_progress": PASS,
    "response.file_search_call.searching": PASS,
    "response.file_search_call.completed": PASS,
    "response.web_search_call.in_progress": PASS,
    "response.web_search_call.searching": PASS,
    "response.web_search_call.completed": PASS,
    "response.image_generation_call.in_progress": PASS,
    "response.image_generation_call.generating": PASS,
    "response.image_generation_call.partial_image": PASS,
    "response.image_generation_call.completed": PASS,
    "response.mcp_call_arguments.delta": PASS,
    "response.mcp_call_arguments.done": PASS,
    "response.mcp_call.in_progress": PASS,
    "response.mcp_call.completed": PASS,
    "response.mcp_call.failed": PASS,
    "response.mcp_list_tools.in_progress": PASS,
    "response.mcp_list_tools.completed": PASS,
    "response.mcp_list_tools.failed": PASS,
    "response.shell_call_command.added": PASS,
    "response.shell_call_command.delta": PASS,
    "response.shell_call_command.done": PASS,
    "response.shell_call_output_content.delta": PASS,
    "response.shell_call_output_content.done": PASS,
    # WebSocket mode only; listed so a relay that forwards them is understood
    "response.steer": PASS,
    "response.steer.accepted": PASS,
    "response.steer.pending": PASS,
    "response.steer.failed": PASS,
}
"""Every documented ``response.*`` event type: its handler, or ``PASS``."""

TOOL_CALL_ITEMS: Final = frozenset({"function_call", "custom_tool_call"})
"""Output items that are calls for the client to run (and so end a turn with ``tool_calls``)."""

FINISH_REASONS: Final[Mapping[str, tuple[Status, FinishReason]]] = {
    "completed": (Status.COMPLETED, FinishReason.STOP),  # response.completed
    # incomplete_details.reason of response.incomplete
    "max_output_tokens": (Status.TRUNCATED, FinishReason.LENGTH),
    "content_filter": (Status.FILTERED, FinishReason.CONTENT_FILTER),
}

COMPLETED_WITH_TOOL_CALLS: Final = (Status.COMPLETED, FinishReason.TOOL_CALLS)
"""response.completed whose output holds a call for the client (raw stays "completed")."""

RETRYABLE_ERRORS: Final = frozenset({"server_error", "rate_limit_exceeded"})


class OpenAIResponsesDialect(SSEDialect):
    name = "openai-responses"
    route = Route(provider=OPENAI, paths=("/v1/responses",))
    genai_provider = "openai"
    end_marker = False
    numbered = True
    resumes_upstream = True
    _state = ("_started", "_saw_tool_call")

    def wrap_error(self, error: dict[str, Any]) -> dict[str, Any]:
        return {"type": "error", "error": error}

    @staticmethod
    def genai_input(body: dict[str, Any]) -> genai.GenAIInput:
        """``instructions`` and ``input``: a string (one user message) or a list of items —
        messages (a ``system``/``developer`` one is instructions), ``function_call`` and
        ``function_call_output`` (as the assistant's call and the tool's answer), others by
        their type."""
        system = genai.text(body.get("instructions"))
        value = body.get("input")
        if isinstance(value, str):
            return [genai.message("user", genai.text(value))], system
        messages: list[dict[str, Any]] = []
        for item in genai.items(value):
            kind, role, content = item.get("type"), item.get("role"), item.get("content")
            if kind == "function_call":
                messages.append(genai.message("assistant", [genai.tool_call(
                    item.get("call_id"), item.get("name"), item.get("arguments"))]))
            elif kind == "function_call_output":
                messages.append(genai.message("tool", [genai.tool_response(
                    item.get("call_id"), item.get("output"))]))
            elif role is None:
                messages.append(genai.message("user", [genai.other(kind)]))
            else:
                parts = genai.text(content) if isinstance(content, str) else [
                    genai.text_or_other(part, ("input_text", "output_text"))
                    for part in genai.items(content)]
                if role in ("system", "developer"):
                    system += parts
                else:
                    messages.append(genai.message(role, parts))
        return messages, system

    def __init__(self) -> None:
        super().__init__()
        self._saw_tool_call = False
        self._handlers = self._bind(EVENT_TYPES)

    def provider_seq(self, payload: Any) -> int | None:
        if payload is DONE:
            return None
        number = payload.get("sequence_number")
        return number if type(number) is int else None

    def _events(self, frame: Any, payload: Any, seq: int) -> list[Event]:
        if payload is DONE:
            return [StreamEnd(seq=seq, marker="[DONE]")]
        kind = payload.get("type")
        if kind is None:
            kind = frame.event
        handler = self._handlers.get(kind)
        if handler is not None:
            out = handler(self, payload, seq)
            if out:
                return out
        return [UnknownEvent(seq=seq, type=str(kind), raw=payload)]

    def _created(self, payload: Any, seq: int) -> list[Event]:
        response = payload.get("response") or {}
        return self._start(seq, response.get("id"), response.get("model"))

    def _text_delta(self, payload: Any, seq: int) -> list[Event]:
        text = payload.get("delta")
        return [TextDelta(seq=seq, text=text)] if isinstance(text, str) and text else []

    def _reasoning_delta(self, payload: Any, seq: int) -> list[Event]:
        text = payload.get("delta")
        return [ReasoningDelta(seq=seq, text=text)] if isinstance(text, str) and text else []

    def _item_added(self, payload: Any, seq: int) -> list[Event]:
        item = payload.get("item") or {}
        index = payload.get("output_index")
        if item.get("type") not in TOOL_CALL_ITEMS or type(index) is not int:
            return []
        self._saw_tool_call = True
        # custom tools take free text as "input"; functions take JSON "arguments"
        arguments = item.get("arguments", item.get("input"))
        return [
            ToolCallDelta(
                seq=seq,
                index=index,
                id=item.get("call_id") or None,
                name=item.get("name") or None,
                arguments=arguments if isinstance(arguments, str) else "",
            )
        ]

    def _arguments_delta(self, payload: Any, seq: int) -> list[Event]:
        index, fragment = payload.get("output_index"), payload.get("delta")
        if type(index) is not int or not isinstance(fragment, str) or not fragment:
            return []
        return [ToolCallDelta(seq=seq, index=index, arguments=fragment)]

    def _completed(self, payload: Any, seq: int) -> list[Event]:
        response = payload.get("response") or {}
        out = _usage(response.get("usage"), seq)
        output = response.get("output")
        if isinstance(output, list):
            calls = any(item.get("type") in TOOL_CALL_ITEMS for item in output)
        else:  # a relay that trimmed the final snapshot: trust what streamed
            calls = self._saw_tool_call
        if calls:
            status, reason = COMPLETED_WITH_TOOL_CALLS
            out.append(Finish(seq=seq, status=status, reason=reason, raw="completed"))
        else:
            out.append(finish(FINISH_REASONS, "completed", seq))
        return out

    def _incomplete(self, payload: Any, seq: int) -> list[Event]:
        response = payload.get("response") or {}
        out = _usage(response.get("usage"), seq)
        details = response.get("incomplete_details") or {}
        reason = details.get("reason")
        out.append(finish(FINISH_REASONS, reason if isinstance(reason, str) else "incomplete", seq))
        return out

    def _failed(self, payload: Any, seq: int) -> list[Event]:
        response = payload.get("response") or {}
        out = _usage(response.get("usage"), seq)
        error = response.get("error") or {}
        out.append(self._error_from(error, payload, seq, default="response.failed"))
        return out

    def _error(self, payload: Any, seq: int) -> list[Event]:
        # Documented flat ({"type": "error", "code", "message"}); some relays nest an object.
        error = payload.get("error")
        return [self._error_from(error if isinstance(error, dict) else payload, payload, seq)]

    def _error_from(self, error: Any, payload: Any, seq: int, default: str = "error") -> ErrorEvent:
        code, kind = error.get("code"), error.get("type")
        names = [n for n in (code, kind) if isinstance(n, str) and n and n != "error"]
        retryable = any(name in RETRYABLE_ERRORS for name in names)
        type_ = names[0] if names else default
        return error_event(seq, type_, error.get("message"), retryable, payload)

    # -- the proxy's own frames and error bodies (what the mark says: resumption.py) ------------

    def proxy_error(self, domain: str, mark: Mapping[str, str], message: str,
                    provider_seq: int | None) -> tuple[str | None, dict[str, Any]]:
        """The documented ``error`` event (code and message at the top) with a nested ``error``
        object, which is what makes the OpenAI SDK raise ``APIError`` (with that object as
        ``body``) instead of yielding the event quietly; the mark is inside it."""
        code = mark["code"]
        payload: dict[str, Any] = {
            "type": "error", "code": code, "message": message, "param": None,
            "error": {"type": "server_error", "code": code, "message": message, "param": None,
                      domain: dict(mark)}}
        if provider_seq is not None:
            payload["sequence_number"] = provider_seq
        return "error", payload

    def proxy_mark_fields(self, payload: Any, domain: str) -> dict[str, str] | None:
        if payload.__class__ is not dict or payload.get("type") != "error":
            return None
        return marked_error(payload.get("error"), domain)

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = "invalid_request_error" if status < 500 else "server_error"
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}



def _usage(usage: Any, seq: int) -> list[Event]:
    if not isinstance(usage, dict):
        return []
    output = usage.get("output_tokens_details")
    inputs = usage.get("input_tokens_details")
    return [
        Usage(
            seq=seq,
            input_tokens=count(usage.get("input_tokens")),
            output_tokens=count(usage.get("output_tokens")),
            total_tokens=count(usage.get("total_tokens")),
            reasoning_tokens=count(output.get("reasoning_tokens")) if output else None,
            cached_tokens=count(inputs.get("cached_tokens")) if inputs else None,
        )
    ]
