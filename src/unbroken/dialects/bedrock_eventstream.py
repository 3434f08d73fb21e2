"""What AWS Bedrock's two streaming operations share: the origin, the event-stream framing, and
how a message that is not an event is read.

``ConverseStream`` and ``InvokeModelWithResponseStream`` are both ``POST /model/{modelId}/...``
answered with an AWS event stream (``application/vnd.amazon.eventstream``): binary messages whose
``:message-type`` header says ``event`` (``:event-type`` names it; the payload is JSON),
``exception`` (``:exception-type`` names it, the payload holds ``message``) or ``error``
(``:error-code`` and ``:error-message`` headers, no payload). The two differ only in their events.

Exceptions are retryable when the service says to try again (``throttlingException``,
``serviceUnavailableException``, ``modelStreamErrorException``, ``modelTimeoutException``) and
for its own failures (``internalServerException``, HTTP 500), as server errors are for every
provider.
"""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Mapping
from typing import Any, Final

from .._jsonparse import dumps_compact, loads
from ..errors import PayloadError
from ..events import Event
from ..framing import EVENT_STREAM, encode_message
from .base import DialectBase, error_event, marked_error
from .routes import AsksStream, Provider, Route

__all__ = ["BEDROCK", "EXCEPTIONS", "BedrockEventStreamDialect", "model_route"]

BEDROCK: Final = Provider(name="bedrock",
                          default_origin="https://bedrock-runtime.us-east-1.amazonaws.com",
                          prefixes=("/model/",))
"""The origin of both operations (the proxy's ``--bedrock``)."""

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

_MODEL_PATH: Final = re.compile(r"/model/(?P<model>[^/]+)/(?P<method>[a-z-]+)")
_MESSAGE_TYPE: Final = ":message-type"

# The proxy's mark at the end of its exception message, " [<domain>: name=value, ...]" with the
# mark's own fields (``proxy_error``); which fields a mark has is ``resumption.ProxyMark``'s.
_MARK_AT_END: Final = re.compile(r" \[(?P<domain>\w+): (?P<fields>\w+=\w+(?:, \w+=\w+)*)\]\Z")
# How the service ends a stream it cannot finish; boto3 raises it as EventStreamError.
_PROXY_EXCEPTION: Final = {":exception-type": "internalServerException",
                           ":content-type": "application/json", ":message-type": "exception"}


def model_route(method: str) -> Route:
    """The route of the streaming operation ``/model/{modelId}/{method}`` (the path alone asks
    for the stream; the model's other operations pass through to the origin)."""
    return Route(provider=BEDROCK, pattern=_MODEL_PATH, stream_methods=frozenset({method}),
                 asks=AsksStream.ALWAYS)


def load_object(name: str, data: bytes, what: str) -> dict[str, Any]:
    """``data`` as a JSON object; ``PayloadError`` (naming ``what`` it was) otherwise."""
    try:
        value = loads(data.decode())
    except ValueError as exc:  # UnicodeDecodeError is a ValueError too
        raise PayloadError(f"{name}: malformed JSON in the {what}: {exc}") from exc
    if type(value) is not dict:
        raise PayloadError(f"{name}: {what} is JSON {type(value).__name__}, expected an object")
    return value


class BedrockEventStreamDialect(DialectBase):
    """A Bedrock operation's event stream: exceptions and errors here, events in the subclass
    (``_event``)."""

    framing = EVENT_STREAM
    media_type = "application/vnd.amazon.eventstream"
    genai_provider = "aws.bedrock"

    def load(self, frame: Any) -> Any:
        """The payload's JSON object (``{}`` when there is none, as in an ``error`` message)."""
        payload: bytes = frame.payload
        return load_object(self.name, payload, "payload") if payload else {}

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
        return self._event(headers.get(":event-type") if kind == "event" else None, kind,
                           payload, seq)

    @abstractmethod
    def _event(self, event: Any, kind: Any, payload: Any, seq: int) -> list[Event]:
        """The events of an ``event`` message named ``event`` (``None`` for a message of
        another ``:message-type``, ``kind``)."""

    # -- the proxy's own frames and error bodies (what the mark says: resumption.py) ------------

    def proxy_error(self, domain: str, mark: Mapping[str, str], message: str,
                    provider_seq: int | None) -> tuple[str | None, dict[str, Any]]:
        """The payload of an ``internalServerException`` message (``frame_bytes``): the
        ``message`` boto3 shows, the mark beside it under ``domain``. botocore keeps only an
        exception's message, so the mark is also written at the message's end, where
        ``proxy_mark_fields`` reads it back from what boto3 raised."""
        said = ", ".join(f"{name}={value}" for name, value in mark.items())
        return None, {"message": f"{message} [{domain}: {said}]", "reason": mark["code"],
                      domain: dict(mark)}

    def proxy_mark_fields(self, payload: Any, domain: str) -> dict[str, str] | None:
        """The mark beside the message, else (boto3's ``EventStreamError`` keeps the message
        alone) the one at its end; the message without it either way."""
        marked = marked_error(payload, domain)
        message = payload.get("message") if isinstance(payload, dict) else None
        if not isinstance(message, str):
            return marked
        found = _MARK_AT_END.search(message)
        if found is None or found["domain"] != domain:
            return marked
        said = dict(field.split("=") for field in found["fields"].split(", "))
        return {**(said if marked is None else marked), "message": message[:found.start()]}

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        # AWS's JSON error body: the message alone (the type travels in a header).
        return {"message": message}

    def frame_bytes(self, payload: dict[str, Any]) -> bytes:
        """An event-stream exception message with ``payload`` as its JSON."""
        return encode_message(dict(_PROXY_EXCEPTION), dumps_compact(payload).encode())
