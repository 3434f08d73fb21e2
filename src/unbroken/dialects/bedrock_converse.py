"""AWS Bedrock ``ConverseStream`` (``POST /model/{modelId}/converse-stream``).

The body is an AWS event stream (``application/vnd.amazon.eventstream``): binary messages whose
``:message-type`` header says ``event`` (the ``:event-type`` header names it, the payload is its
JSON members), ``exception`` (``:exception-type`` names it, the payload holds ``message``) or
``error`` (``:error-code`` and ``:error-message`` headers, no payload). Events: ``messageStart``,
then per content block ``contentBlockStart`` (a tool call's id and name), ``contentBlockDelta``
(``text``, ``toolUse.input`` fragments, ``reasoningContent``) and ``contentBlockStop``, then
``messageStop`` with the ``stopReason``, then ``metadata`` with the usage. Nothing follows the
stop reason but the usage: there is no end marker. Bedrock pads payloads with a ``p`` member of
random length (so that sizes do not reveal the text); it says nothing and is ignored.

Exceptions are retryable when the service says to try again (``throttlingException``,
``serviceUnavailableException``, ``modelStreamErrorException``, ``modelTimeoutException``) and
for its own failures (``internalServerException``, HTTP 500), as server errors are for every
provider.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from .._jsonparse import dumps_compact, loads
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
from ..framing import EVENT_STREAM, encode_message
from .base import PASS, DialectBase, count, error_event, finish, marked_error
from .routes import AsksStream, Provider, Route

__all__ = ["EVENT_TYPES", "EXCEPTIONS", "FINISH_REASONS", "BedrockConverseDialect"]

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

EXCEPTIONS: Final[Mapping[str, bool]] = {
    "throttlingException": True,
    "serviceUnavailableException": True,
    "modelStreamErrorException": True,
    "modelTimeoutException": True,
    "internalServerException": True,
    "validationException": False,
    "accessDeniedException": False,
    "resourceNotFoundException": False,
}
"""Every documented exception type: whether trying again may succeed."""

_MESSAGE_TYPE = ":message-type"

# How the service ends a stream it cannot finish; boto3 raises it as EventStreamError.
_PROXY_EXCEPTION: Final = {":exception-type": "internalServerException",
                           ":content-type": "application/json", ":message-type": "exception"}


class BedrockConverseDialect(DialectBase):
    name = "bedrock-converse"
    framing = EVENT_STREAM
    media_type = "application/vnd.amazon.eventstream"
    end_marker = False
    route = Route(
        provider=Provider(name="bedrock",
                          default_origin="https://bedrock-runtime.us-east-1.amazonaws.com",
                          prefixes=("/model/",)),
        pattern=re.compile(r"/model/[^/]+/(?P<method>[a-z-]+)"),
        stream_methods=frozenset({"converse-stream"}),
        asks=AsksStream.ALWAYS,
    )

    def __init__(self) -> None:
        super().__init__()
        self._handlers = self._bind(EVENT_TYPES)
        self._deltas = self._bind_parts("delta", EVENT_TYPES)
        self._starts = self._bind_parts("start", EVENT_TYPES)

    def load(self, frame: Any) -> Any:
        """The payload's JSON object (``{}`` when there is none, as in an ``error`` message)."""
        payload: bytes = frame.payload
        if not payload:
            return {}
        try:
            value = loads(payload.decode())
        except ValueError as exc:  # UnicodeDecodeError is a ValueError too
            raise PayloadError(f"{self.name}: malformed JSON in the payload: {exc}") from exc
        if type(value) is not dict:
            raise PayloadError(
                f"{self.name}: payload is JSON {type(value).__name__}, expected an object"
            )
        return value

    def _events(self, frame: Any, payload: Any, seq: int) -> list[Event]:
        headers = frame.headers
        kind = headers.get(_MESSAGE_TYPE)
        if kind == "exception":
            type_ = headers.get(":exception-type")
            type_ = type_ if isinstance(type_, str) and type_ else "exception"
            retryable = EXCEPTIONS.get(type_, False)
            return [error_event(seq, type_, payload.get("message"), retryable, payload)]
        if kind == "error":
            code, text = headers.get(":error-code"), headers.get(":error-message")
            code = code if isinstance(code, str) and code else "error"
            raw = {"errorCode": code, "errorMessage": text}
            return [error_event(seq, code, text, False, raw)]
        event = headers.get(":event-type")
        handler = self._handlers.get(event) if kind == "event" else None
        if handler is None or EVENT_TYPES[event] == PASS:
            return [UnknownEvent(seq=seq, type=str(event or kind), raw=payload)]
        return handler(payload, seq) or [UnknownEvent(seq=seq, type=event, raw=payload)]

    # -- the proxy's own frames and error bodies (what the mark says: resumption.py) ------------

    def proxy_error(self, domain: str, mark: Mapping[str, str], message: str,
                    provider_seq: int | None) -> tuple[str | None, dict[str, Any]]:
        """The payload of an ``internalServerException`` message (``frame_bytes``): the
        ``message`` boto3 shows, the mark beside it under ``domain``."""
        return None, {"message": message, "reason": mark["code"], domain: dict(mark)}

    def proxy_mark_fields(self, payload: Any, domain: str) -> dict[str, str] | None:
        return marked_error(payload, domain)

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        # AWS's JSON error body: the message alone (the type travels in a header).
        return {"message": message}

    def frame_bytes(self, payload: dict[str, Any]) -> bytes:
        """An event-stream exception message with ``payload`` as its JSON."""
        return encode_message(dict(_PROXY_EXCEPTION), dumps_compact(payload).encode())

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
                out += handler(payload, value, seq)
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
