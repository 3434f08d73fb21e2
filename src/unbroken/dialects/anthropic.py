"""Anthropic Messages streaming (``POST /v1/messages`` with ``"stream": true``).

Every SSE event names its type twice (``event:`` and the data's ``type``). Content arrives in
blocks: ``content_block_start`` opens block ``index``, deltas extend it, ``content_block_stop``
closes it. ``message_delta`` carries the stop reason and *cumulative* usage; ``message_stop`` is the
end marker; ``ping`` is a keep-alive; ``error`` (e.g. ``overloaded_error``) may come at any time.
Anthropic may add event types; unknown ones are passed through.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ..events import (
    Event,
    Ping,
    ReasoningDelta,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    UnknownEvent,
    Usage,
)
from ..finish import FinishReason, Status
from . import genai_messages as genai
from .base import (
    DONE,
    PASS,
    DialectBase,
    SSEDialect,
    count,
    error_event,
    finish,
    marked_error,
)
from .routes import Provider, Route

__all__ = ["EVENT_TYPES", "RETRYABLE_ERRORS", "STOP_REASONS", "AnthropicDialect"]

EVENT_TYPES: Final[Mapping[str, str]] = {
    "message_start": "message_start",
    "content_block_start": "block_start",
    "content_block_delta": "block_delta",
    "content_block_stop": PASS,
    "message_delta": "message_delta",
    "message_stop": "message_stop",
    "ping": "ping",
    "error": "error",
    # content_block_start, by content_block.type
    "content_block_start/text": "text_block",
    "content_block_start/thinking": "thinking_block",
    "content_block_start/redacted_thinking": PASS,
    "content_block_start/tool_use": "tool_use_block",
    # server tools run at Anthropic: not calls for the client to make
    "content_block_start/server_tool_use": PASS,
    "content_block_start/web_search_tool_result": PASS,
    "content_block_start/web_fetch_tool_result": PASS,
    "content_block_start/code_execution_tool_result": PASS,
    "content_block_start/bash_code_execution_tool_result": PASS,
    "content_block_start/text_editor_code_execution_tool_result": PASS,
    "content_block_start/tool_search_tool_result": PASS,
    "content_block_start/container_upload": PASS,
    # content_block_delta, by delta.type
    "content_block_delta/text_delta": "text_delta",
    "content_block_delta/input_json_delta": "input_json_delta",
    "content_block_delta/citations_delta": PASS,
    "content_block_delta/thinking_delta": "thinking_delta",
    "content_block_delta/signature_delta": "signature_delta",
}
"""Every documented event type (and block / delta kind): its handler, or ``PASS``."""

STOP_REASONS: Final[Mapping[str, tuple[Status, FinishReason]]] = {
    "end_turn": (Status.COMPLETED, FinishReason.STOP),
    "stop_sequence": (Status.COMPLETED, FinishReason.STOP),
    "tool_use": (Status.COMPLETED, FinishReason.TOOL_CALLS),
    "pause_turn": (Status.COMPLETED, FinishReason.PAUSE),
    "max_tokens": (Status.TRUNCATED, FinishReason.LENGTH),
    "model_context_window_exceeded": (Status.TRUNCATED, FinishReason.LENGTH),
    "refusal": (Status.FILTERED, FinishReason.CONTENT_FILTER),
}

RETRYABLE_ERRORS: Final = frozenset(
    {"overloaded_error", "rate_limit_error", "api_error", "timeout_error"}
)


class AnthropicDialect(SSEDialect):
    name = "anthropic"
    route = Route(
        provider=Provider(name="anthropic", default_origin="https://api.anthropic.com",
                          prefixes=("/v1/messages",), headers=("anthropic-version",)),
        paths=("/v1/messages",),
    )
    genai_provider = "anthropic"
    _state = ("_started", "_tool_blocks")

    @staticmethod
    def genai_input(body: dict[str, Any]) -> genai.GenAIInput:
        """``system`` (a string or text blocks) and ``messages`` (a string or content blocks:
        text, thinking, tool_use, tool_result; images and documents by their type)."""
        system = body.get("system")
        instructions = genai.text(system) if isinstance(system, str) else [
            genai.text_or_other(block, ("text",)) for block in genai.items(system)]
        messages = []
        for item in genai.items(body.get("messages")):
            content = item.get("content")
            parts = genai.text(content) if isinstance(content, str) else [
                _genai_part(block) for block in genai.items(content)]
            messages.append(genai.message(item.get("role"), parts))
        return messages, instructions

    def __init__(self) -> None:
        super().__init__()
        self._tool_blocks: set[int] = set()  # indexes of client tool_use blocks
        self._handlers = self._bind(EVENT_TYPES)
        self._blocks = self._bind_parts("content_block_start", EVENT_TYPES)
        self._deltas = self._bind_parts("content_block_delta", EVENT_TYPES)

    def _events(self, frame: Any, payload: Any, seq: int) -> list[Event]:
        if payload is DONE:
            return [StreamEnd(seq=seq, marker="[DONE]")]
        kind = payload.get("type")
        if kind is None:
            kind = frame.event
        handler = self._handlers.get(kind)
        if handler is None:
            return [UnknownEvent(seq=seq, type=str(kind), raw=payload)]
        out = handler(self, payload, seq)
        return out if out else [UnknownEvent(seq=seq, type=kind, raw=payload)]

    # -- message level -------------------------------------------------------------------------

    def _message_start(self, payload: Any, seq: int) -> list[Event]:
        message = payload.get("message") or {}
        out = self._start(seq, message.get("id"), message.get("model"))
        usage = _usage(message.get("usage"), seq)
        if usage is not None:
            out.append(usage)
        return out

    def _message_delta(self, payload: Any, seq: int) -> list[Event]:
        out: list[Event] = []
        usage = _usage(payload.get("usage"), seq)
        if usage is not None:
            out.append(usage)
        reason = (payload.get("delta") or {}).get("stop_reason")
        if isinstance(reason, str) and reason:
            out.append(finish(STOP_REASONS, reason, seq))
        return out

    def _message_stop(self, payload: Any, seq: int) -> list[Event]:
        return [StreamEnd(seq=seq, marker="message_stop")]

    def _ping(self, payload: Any, seq: int) -> list[Event]:
        return [Ping(seq=seq)]

    def _error(self, payload: Any, seq: int) -> list[Event]:
        error = payload.get("error")
        if not isinstance(error, dict):
            error = {}
        type_ = error.get("type")
        type_ = type_ if isinstance(type_, str) and type_ else "error"
        return [error_event(seq, type_, error.get("message"), type_ in RETRYABLE_ERRORS, payload)]

    # -- content blocks ------------------------------------------------------------------------

    def _block_start(self, payload: Any, seq: int) -> list[Event]:
        block: Any = payload.get("content_block") or {}
        handler = self._blocks.get(block.get("type")) or DialectBase._part_pass
        return handler(self, payload, block, seq)

    def _block_delta(self, payload: Any, seq: int) -> list[Event]:
        delta: Any = payload.get("delta") or {}
        kind = delta.get("type")
        if kind == "text_delta":  # the hot path, inline
            text = delta.get("text")
            if text.__class__ is str and text:
                return [TextDelta(seq=seq, text=text)]
        handler = self._deltas.get(kind) or DialectBase._part_pass
        return handler(self, payload, delta, seq)

    def _part_text_block(self, payload: Any, block: Any, seq: int) -> list[Event]:
        text = block.get("text")
        return [TextDelta(seq=seq, text=text)] if isinstance(text, str) and text else []

    def _part_thinking_block(self, payload: Any, block: Any, seq: int) -> list[Event]:
        text = block.get("thinking")
        signature = block.get("signature")
        text = text if isinstance(text, str) else ""
        signature = signature if isinstance(signature, str) and signature else None
        if not text and signature is None:
            return []
        return [ReasoningDelta(seq=seq, text=text, signature=signature)]

    def _part_tool_use_block(self, payload: Any, block: Any, seq: int) -> list[Event]:
        index = payload.get("index")
        if type(index) is not int:
            return []
        self._tool_blocks.add(index)
        return [ToolCallDelta(seq=seq, index=index, id=block.get("id"), name=block.get("name"))]

    def _part_text_delta(self, payload: Any, delta: Any, seq: int) -> list[Event]:
        text = delta.get("text")
        return [TextDelta(seq=seq, text=text)] if isinstance(text, str) and text else []

    def _part_thinking_delta(self, payload: Any, delta: Any, seq: int) -> list[Event]:
        text = delta.get("thinking")
        return [ReasoningDelta(seq=seq, text=text)] if isinstance(text, str) and text else []

    def _part_signature_delta(self, payload: Any, delta: Any, seq: int) -> list[Event]:
        signature = delta.get("signature")
        if not isinstance(signature, str) or not signature:
            return []
        return [ReasoningDelta(seq=seq, signature=signature)]

    def _part_input_json_delta(self, payload: Any, delta: Any, seq: int) -> list[Event]:
        index = payload.get("index")
        fragment = delta.get("partial_json")
        if index not in self._tool_blocks or not isinstance(fragment, str):
            # input of a server tool (or of an unannounced block): not a client tool call
            return self._part_pass(payload, delta, seq)
        if not fragment:
            return []
        return [ToolCallDelta(seq=seq, index=index, arguments=fragment)]

    # -- the proxy's own frames and error bodies (what the mark says: resumption.py) ------------

    def proxy_error(self, domain: str, mark: Mapping[str, str], message: str,
                    provider_seq: int | None) -> tuple[str | None, dict[str, Any]]:
        """The ``error`` event (the Anthropic SDK raises with the whole payload as ``body``),
        the mark inside its ``error`` object."""
        return "error", {"type": "error", "error": {"type": "api_error", "message": message,
                                                    domain: dict(mark)}}

    def proxy_mark_fields(self, payload: Any, domain: str) -> dict[str, str] | None:
        if payload.__class__ is not dict or payload.get("type") != "error":
            return None
        return marked_error(payload.get("error"), domain)

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = "not_found_error" if status == 404 else "api_error"
        return {"type": "error", "error": {"type": kind, "message": message}}



def _usage(usage: Any, seq: int) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    details = usage.get("output_tokens_details")
    reasoning = count(details.get("thinking_tokens")) if isinstance(details, dict) else None
    report = Usage(
        seq=seq,
        input_tokens=count(usage.get("input_tokens")),
        output_tokens=count(usage.get("output_tokens")),
        reasoning_tokens=reasoning,
        cached_tokens=count(usage.get("cache_read_input_tokens")),
    )
    if report == Usage(seq=seq):
        return None
    return report


def _genai_part(block: dict[str, Any]) -> dict[str, Any]:
    kind = block.get("type")
    if kind == "tool_use":
        return genai.tool_call(block.get("id"), block.get("name"), block.get("input"))
    if kind == "tool_result":
        return genai.tool_response(block.get("tool_use_id"), block.get("content"))
    if kind == "thinking" and (thought := genai.reasoning(block.get("thinking"))):
        return thought[0]
    return genai.text_or_other(block, ("text",))
