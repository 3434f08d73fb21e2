"""AWS Bedrock ``InvokeModelWithResponseStream`` for Anthropic's Claude models
(``POST /model/{modelId}/invoke-with-response-stream``).

The same AWS event stream as ``ConverseStream`` (``bedrock_eventstream``: framing, exceptions,
errors), but every event is a ``chunk`` whose JSON payload is ``{"bytes": "<base64>"}`` (``p``
pads it, as for Converse): the decoded bytes are the model's own stream event, for Claude an
Anthropic Messages event (``message_start`` ... ``message_stop``, read by the ``anthropic``
dialect). Bedrock adds ``amazon-bedrock-invocationMetrics`` to the last event (``message_stop``):
``inputTokenCount``, ``outputTokenCount`` (and the cache counts) for the whole invocation.
``message_stop`` is the end marker, as in Anthropic's own stream.
"""

from __future__ import annotations

import binascii
from typing import Any, Final

from ..errors import PayloadError
from ..events import Event, UnknownEvent, Usage
from .anthropic import AnthropicDialect
from .base import count
from .bedrock_eventstream import BedrockEventStreamDialect, load_object, model_route

__all__ = ["CHUNK", "METRICS", "BedrockInvokeDialect"]

CHUNK: Final = "chunk"
"""The ``:event-type`` of every event of this operation (how ``auto`` tells it from Converse)."""

METRICS: Final = "amazon-bedrock-invocationMetrics"


class BedrockInvokeDialect(BedrockEventStreamDialect):
    name = "bedrock-invoke"
    end_marker = True
    route = model_route("invoke-with-response-stream")
    genai_input = AnthropicDialect.genai_input  # the body is Claude's Messages request

    def __init__(self) -> None:
        super().__init__()
        # The model's own events: Claude's, read as Anthropic's (it keeps its own replay state).
        self._model = AnthropicDialect()

    def load(self, frame: Any) -> Any:
        """A chunk's decoded model event; any other message's JSON payload (an exception's)."""
        payload = super().load(frame)
        if frame.headers.get(":event-type") != CHUNK:
            return payload
        data = payload.get("bytes")
        if not isinstance(data, str):
            raise PayloadError(f"{self.name}: a chunk without its base64 bytes")
        try:
            decoded = binascii.a2b_base64(data, strict_mode=True)
        except binascii.Error as exc:
            raise PayloadError(f"{self.name}: a chunk's bytes are not base64: {exc}") from exc
        return load_object(self.name, decoded, "chunk's bytes")

    def _event(self, event: Any, kind: Any, payload: Any, seq: int) -> list[Event]:
        if event != CHUNK or not isinstance(payload.get("type"), str):
            return [UnknownEvent(seq=seq, type=str(event or kind), raw=payload)]
        out = self._model.events(None, payload, seq)
        metrics = payload.get(METRICS)
        if isinstance(metrics, dict):
            # before the StreamEnd of message_stop: the usage belongs to the message
            out.insert(0, Usage(
                seq=seq,
                input_tokens=count(metrics.get("inputTokenCount")),
                output_tokens=count(metrics.get("outputTokenCount")),
                cached_tokens=count(metrics.get("cacheReadInputTokenCount")),
            ))
        return out
