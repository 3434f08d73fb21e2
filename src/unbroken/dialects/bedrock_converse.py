"""AWS Bedrock ``ConverseStream`` (``POST /model/{modelId}/converse-stream``).

An AWS event stream (``bedrock_eventstream``: the framing, exceptions and errors shared with
``InvokeModelWithResponseStream``) whose ``event`` messages are: ``messageStart``, then per
content block ``contentBlockStart`` (a tool call's id and name), ``contentBlockDelta`` (``text``,
``toolUse.input`` fragments, ``reasoningContent``) and ``contentBlockStop``, then ``messageStop``
with the ``stopReason``, then ``metadata`` with the usage. Nothing follows the stop reason but the
usage: there is no end marker. Bedrock pads payloads with a ``p`` member of random length (so
that sizes do not reveal the text); it says nothing and is ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ..errors import PayloadError
from ..events import (
    Event,
    MessageStart,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    UnknownEvent,
    Usage,
)
from ..finish import FinishReason, Status
from . import genai_messages as genai
from .base import PASS, count, finish
from .bedrock_eventstream import BedrockEventStreamDialect, model_route

__all__ = ["EVENT_TYPES", "FINISH_REASONS", "BedrockConverseDialect"]

EVENT_TYPES: Final[Mapping[str, str]] = {
    "messageStart": "message_start",
    "contentBlockStart": "block_start",
    "contentBlockDelta": "block_delta",
    "contentBlockStop": PASS,
    "messageStop": "message_stop",
    "metadata": "metadata",
    # the members of contentBlockDelta.delta
    "delta/text": "text",
    "delta/toolUse": "tool_use",
    "delta/reasoningContent": "reasoning",
    "delta/citation": PASS,
    "delta/image": PASS,
    "delta/toolResult": PASS,
    # the members of contentBlockStart.start
    "start/toolUse": "tool_start",
    "start/image": PASS,
    "start/toolResult": PASS,
}
"""Every documented event and delta member: its handler, or ``PASS``."""

FINISH_REASONS: Final[Mapping[str, tuple[Status, FinishReason]]] = {
    "end_turn": (Status.COMPLETED, FinishReason.STOP),
    "stop_sequence": (Status.COMPLETED, FinishReason.STOP),
    "tool_use": (Status.COMPLETED, FinishReason.TOOL_CALLS),
    "max_tokens": (Status.TRUNCATED, FinishReason.LENGTH),
    "model_context_window_exceeded": (Status.TRUNCATED, FinishReason.LENGTH),
    "guardrail_intervened": (Status.FILTERED, FinishReason.CONTENT_FILTER),
    "content_filtered": (Status.FILTERED, FinishReason.CONTENT_FILTER),
}


class BedrockConverseDialect(BedrockEventStreamDialect):
    name = "bedrock-converse"
    end_marker = False
    route = model_route("converse-stream")

    @staticmethod
    def genai_input(body: dict[str, Any]) -> genai.GenAIInput:
        """``system`` (text blocks) and ``messages`` of content blocks: ``text``,
        ``toolUse``, ``toolResult``, ``reasoningContent``; images, documents and others by
        their key."""
        instructions = [_genai_block(block) for block in genai.items(body.get("system"))]
        messages = [genai.message(item.get("role"), [_genai_block(block) for block
                                                     in genai.items(item.get("content"))])
                    for item in genai.items(body.get("messages"))]
        return messages, instructions

    def __init__(self) -> None:
        super().__init__()
        self._handlers = self._bind(EVENT_TYPES)
        self._deltas = self._bind_parts("delta", EVENT_TYPES)
        self._starts = self._bind_parts("start", EVENT_TYPES)

    def _event(self, event: Any, kind: Any, payload: Any, seq: int) -> list[Event]:
        handler = self._handlers.get(event)
        if handler is None or EVENT_TYPES[event] == PASS:
            return [UnknownEvent(seq=seq, type=str(event or kind), raw=payload)]
        return handler(self, payload, seq) or [UnknownEvent(seq=seq, type=event, raw=payload)]

    def _message_start(self, payload: Any, seq: int) -> list[Event]:
        # Bedrock names neither the message nor the model in the stream.
        self._started = True
        return [MessageStart(seq=seq)]

    def _block_start(self, payload: Any, seq: int) -> list[Event]:
        return self._members(payload, "start", self._starts, seq)

    def _block_delta(self, payload: Any, seq: int) -> list[Event]:
        return self._members(payload, "delta", self._deltas, seq)

    def _members(self, payload: Any, key: str, handlers: Mapping[str, Any], seq: int
                 ) -> list[Event]:
        out: list[Event] = []
        for member, value in (payload.get(key) or {}).items():
            handler = handlers.get(member)
            if handler is None or EVENT_TYPES.get(f"{key}/{member}") == PASS:
                out.append(UnknownEvent(seq=seq, type=f"{key}/{member}", raw=payload))
            else:
                out += handler(self, payload, value, seq)
        return out

    def _message_stop(self, payload: Any, seq: int) -> list[Event]:
        reason = payload.get("stopReason")
        if not isinstance(reason, str) or not reason:
            return []
        return [finish(FINISH_REASONS, reason, seq)]

    def _metadata(self, payload: Any, seq: int) -> list[Event]:
        usage = payload.get("usage")
        if not isinstance(usage, dict):
            return []
        return [
            Usage(
                seq=seq,
                input_tokens=count(usage.get("inputTokens")),
                output_tokens=count(usage.get("outputTokens")),
                total_tokens=count(usage.get("totalTokens")),
                cached_tokens=count(usage.get("cacheReadInputTokens")),
            )
        ]

    # -- members of a block's start and delta ---------------------------------------------------

    def _part_text(self, payload: Any, value: Any, seq: int) -> list[Event]:
        return [TextDelta(seq=seq, text=value)] if isinstance(value, str) and value else []

    def _part_tool_start(self, payload: Any, value: Any, seq: int) -> list[Event]:
        call_id, name = value.get("toolUseId"), value.get("name")
        return [ToolCallDelta(seq=seq, index=_index(payload), id=call_id or None,
                              name=name or None)]

    def _part_tool_use(self, payload: Any, value: Any, seq: int) -> list[Event]:
        arguments = value.get("input")
        if not isinstance(arguments, str) or not arguments:
            return []
        return [ToolCallDelta(seq=seq, index=_index(payload), arguments=arguments)]

    def _part_reasoning(self, payload: Any, value: Any, seq: int) -> list[Event]:
        text, signature = value.get("text"), value.get("signature")
        if isinstance(text, str) and text:
            return [ReasoningDelta(seq=seq, text=text)]
        if isinstance(signature, str) and signature:
            return [ReasoningDelta(seq=seq, signature=signature)]
        # redactedContent: reasoning the provider encrypted; nothing to show
        return [UnknownEvent(seq=seq, type="delta/reasoningContent", raw=payload)]


def _index(payload: Any) -> int:
    index = payload.get("contentBlockIndex")
    if type(index) is not int:
        raise PayloadError("bedrock-converse: a tool call without its contentBlockIndex")
    return index


def _genai_block(block: dict[str, Any]) -> dict[str, Any]:
    text = block.get("text")
    if isinstance(text, str):
        return genai.part("text", text)
    use, result = block.get("toolUse"), block.get("toolResult")
    if isinstance(use, dict):
        return genai.tool_call(use.get("toolUseId"), use.get("name"), use.get("input"))
    if isinstance(result, dict):
        return genai.tool_response(result.get("toolUseId"), result.get("content"))
    reasoning = block.get("reasoningContent")
    said = reasoning.get("reasoningText") if isinstance(reasoning, dict) else None
    if isinstance(said, dict) and (thought := genai.reasoning(said.get("text"))):
        return thought[0]
    return genai.other(next(iter(block), None))
