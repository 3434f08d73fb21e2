"""``from_gemini``: the google-genai SDK's stream, unchanged, with a ``Message`` built alongside.

Takes ``client.models.generate_content_stream(...)`` or the awaited
``client.aio.models.generate_content_stream(...)``. Each ``GenerateContentResponse`` is dumped
back to the JSON the wire carried (``by_alias`` gives its camelCase keys) and mapped by the
``gemini`` dialect. Gemini has no end marker: a stream whose last chunk had no ``finishReason``
ends ``interrupted``, never ``completed``.

The SDK's own follow-ups stay in the one message: automatic function calling and automatic
continuation send further requests whose chunks come out of the same iterator (a finish reason
is provisional, the last one stands).

Errors: google-genai raises ``google.genai.errors.APIError`` (``ClientError`` / ``ServerError``)
for an error status and for an in-stream ``{"error": ...}`` event; ``details`` holds the error
body, which fails the message with the provider's error. Transport failures (httpx2 / httpx
errors, timeouts) and anything else interrupt it.
"""

from __future__ import annotations

import base64
import inspect
from collections.abc import AsyncIterable, Iterable
from typing import Any, Final, TypeVar, overload

from ..dialects.gemini import GeminiDialect
from .tracked import AsyncTrackedStream, TrackedStream, is_sdk_error, refuse_unawaited

__all__ = ["GeminiAdapter", "from_gemini"]

T = TypeVar("T")

SDK_FIELDS: Final = frozenset({"sdk_http_response", "automatic_function_calling_history", "parsed"})
"""Fields google-genai adds to a response itself: the HTTP headers, its own AFC history and the
parsed JSON. None of them is on the wire."""


class GeminiAdapter:
    expect_end_marker = False

    def __init__(self) -> None:
        self.dialect = GeminiDialect()

    def dialect_for(self, payload: dict[str, Any]) -> Any:
        return self.dialect

    def payload(self, obj: Any) -> dict[str, Any] | None:
        if isinstance(obj, dict):
            return obj
        dumped: dict[str, Any] = obj.model_dump(
            mode="json", by_alias=True, exclude_none=True, exclude=SDK_FIELDS
        )
        _restore_base64(obj, dumped)
        return dumped

    def error_payload(self, exc: BaseException) -> dict[str, Any] | None:
        if not is_sdk_error(exc, "google.genai.errors", "APIError"):
            return None
        details = getattr(exc, "details", None)
        error = details.get("error") if isinstance(details, dict) else None
        if isinstance(error, dict):
            return {"error": error}  # the body as the wire carried it
        # A body that was not JSON: the SDK kept its text as ``message``, the reason phrase as
        # ``status``.
        fields = {
            "code": getattr(exc, "code", None),
            "message": getattr(exc, "message", None) or str(exc),
            "status": getattr(exc, "status", None),
        }
        return {"error": {key: value for key, value in fields.items() if value is not None}}


def _restore_base64(response: Any, dumped: dict[str, Any]) -> None:
    """Put back the standard base64 of bytes fields the dialect reads or keeps as evidence.

    pydantic writes ``bytes`` as URL-safe base64 (``-`` and ``_``); the wire, and whatever sends
    a thought signature back, uses the standard alphabet (``+`` and ``/``).
    """
    for candidate, dumped_candidate in zip(
        getattr(response, "candidates", None) or (), dumped.get("candidates", ()), strict=False
    ):
        content = candidate.content
        dumped_parts = dumped_candidate.get("content", {}).get("parts", ())
        for part, dumped_part in zip(content.parts or () if content else (), dumped_parts,
                                     strict=False):
            signature = part.thought_signature
            if isinstance(signature, bytes):
                dumped_part["thoughtSignature"] = base64.b64encode(signature).decode("ascii")
            inline = part.inline_data
            if inline is not None and isinstance(inline.data, bytes):
                dumped_part["inlineData"]["data"] = base64.b64encode(inline.data).decode("ascii")


@overload
def from_gemini(stream: AsyncIterable[T], *, trace: bool = True) -> AsyncTrackedStream[T]: ...


@overload
def from_gemini(stream: Iterable[T], *, trace: bool = True) -> TrackedStream[T]: ...


def from_gemini(
    stream: Iterable[T] | AsyncIterable[T], *, trace: bool = True
) -> TrackedStream[T] | AsyncTrackedStream[T]:
    """Wrap ``client.models.generate_content_stream(...)`` (sync) or the awaited
    ``client.aio.models.generate_content_stream(...)`` (async)."""
    if inspect.isawaitable(stream):
        refuse_unawaited(stream, "from_gemini", "client.aio.models.generate_content_stream(...)")
    if hasattr(stream, "__aiter__"):
        return AsyncTrackedStream(stream, GeminiAdapter(), trace=trace)
    return TrackedStream(stream, GeminiAdapter(), trace=trace)
