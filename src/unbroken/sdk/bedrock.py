"""``from_bedrock``: boto3's Bedrock streams, unchanged, with a ``Message`` alongside.

Takes the response of ``client.converse_stream(...)`` or of
``client.invoke_model_with_response_stream(...)`` (a ``bedrock-runtime`` client), or its stream
(``["stream"]``, ``["body"]``). botocore yields one dict per event, keyed by the event type:
``{"contentBlockDelta": {"delta": {"text": ...}, "contentBlockIndex": 0}}`` from Converse,
``{"chunk": {"bytes": b'{"type": "content_block_delta", ...}'}}`` from InvokeModel (the bytes
already decoded from base64). Each is mapped by its operation's dialect as the event-stream
message it came in; the first event tells which operation it is.

Errors: an exception message in the stream (``throttlingException``,
``modelStreamErrorException`` ...) is raised by botocore as ``EventStreamError`` with the
exception type as its code: that fails the message with the provider's error, ``retryable`` as
the dialect's table says. The proxy's own exception (its mark at the end of the message, the
only field botocore keeps) ends it as the proxy journaled it. Anything else interrupts it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .._jsonparse import loads
from ..dialects import BedrockConverseDialect, BedrockInvokeDialect
from ..dialects.bedrock_invoke import CHUNK
from ..errors import PayloadError
from ..framing import EventStreamMessage
from .tracked import TrackedStream, is_sdk_error

__all__ = ["BedrockAdapter", "from_bedrock"]


class BedrockAdapter:
    """``invoke``: the stream is InvokeModelWithResponseStream's, whose ``message_stop`` ends
    it (an end marker to expect); ``None``: not known before its first event."""

    def __init__(self, *, invoke: bool | None = None) -> None:
        self.expect_end_marker = BedrockInvokeDialect.end_marker if invoke else (
            BedrockConverseDialect.end_marker)
        self.dialect: BedrockConverseDialect | BedrockInvokeDialect | None = (
            None if invoke is None else BedrockInvokeDialect() if invoke
            else BedrockConverseDialect())
        self._headers: dict[str, str | bool | int | bytes] = {}

    def dialect_for(self, payload: dict[str, Any]) -> Any:
        if self.dialect is None:  # the first event names the operation
            chunk = self._headers.get(":event-type") == CHUNK
            self.dialect = BedrockInvokeDialect() if chunk else BedrockConverseDialect()
        return self.dialect

    def payload(self, obj: Any) -> dict[str, Any] | None:
        [(kind, members)] = obj.items()
        self._headers = {":message-type": "event", ":event-type": kind}
        if kind != CHUNK:
            return dict(members)
        # the model's event, as the invoke dialect's load reads it out of the chunk
        data = members.get("bytes")
        try:
            event = loads(data.decode() if isinstance(data, bytes) else data)
        except (ValueError, TypeError) as exc:
            raise PayloadError(f"from_bedrock: a chunk's bytes are not JSON: {exc}") from exc
        if type(event) is not dict:
            raise PayloadError("from_bedrock: a chunk's bytes are not a JSON object")
        return event

    def frame(self, payload: dict[str, Any]) -> EventStreamMessage:
        """The message ``payload`` came in, as far as the dialect reads it: its headers."""
        return EventStreamMessage(self._headers, b"", 0, b"")

    def error_payload(self, exc: BaseException) -> dict[str, Any] | None:
        if not is_sdk_error(exc, "botocore.exceptions", "EventStreamError"):
            return None
        error = getattr(exc, "response", {}).get("Error", {})
        self._headers = {":message-type": "exception", ":exception-type": error.get("Code", "")}
        return {"message": error.get("Message", "")}


def from_bedrock(
    response: Mapping[str, Any] | Iterable[Any], *, trace: bool = True
) -> TrackedStream[Any]:
    """Wrap ``client.converse_stream(...)`` or ``client.invoke_model_with_response_stream(...)``
    (the response, or its stream)."""
    if isinstance(response, Mapping):
        invoke = "body" in response
        return TrackedStream(response["body" if invoke else "stream"],
                             BedrockAdapter(invoke=invoke), trace=trace)
    return TrackedStream(response, BedrockAdapter(), trace=trace)
