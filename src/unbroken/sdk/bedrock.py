"""``from_bedrock``: boto3's ``converse_stream`` stream, unchanged, with a ``Message`` alongside.

Takes the response of ``client.converse_stream(...)`` (a ``bedrock-runtime`` client) or its
``["stream"]``. botocore yields one dict per event, keyed by the event type
(``{"contentBlockDelta": {"delta": {"text": ...}, "contentBlockIndex": 0}}``); each is mapped by
the ``bedrock-converse`` dialect as the event-stream message it came in.

Errors: an exception message in the stream (``throttlingException``,
``modelStreamErrorException`` ...) is raised by botocore as ``EventStreamError`` with the
exception type as its code: that fails the message with the provider's error, ``retryable`` as
the dialect's table says. Anything else interrupts it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..dialects import BedrockConverseDialect
from ..framing import EventStreamMessage
from .tracked import TrackedStream, is_sdk_error

__all__ = ["BedrockAdapter", "from_bedrock"]


class BedrockAdapter:
    expect_end_marker = BedrockConverseDialect.end_marker

    def __init__(self) -> None:
        self.dialect = BedrockConverseDialect()
        self._headers: dict[str, str | bool | int | bytes] = {}

    def dialect_for(self, payload: dict[str, Any]) -> Any:
        return self.dialect

    def payload(self, obj: Any) -> dict[str, Any] | None:
        [(kind, members)] = obj.items()
        self._headers = {":message-type": "event", ":event-type": kind}
        return dict(members)

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
    """Wrap ``client.converse_stream(...)`` (the response, or its ``["stream"]``)."""
    stream = response["stream"] if isinstance(response, Mapping) else response
    return TrackedStream(stream, BedrockAdapter(), trace=trace)
