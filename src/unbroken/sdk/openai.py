"""``from_openai``: the openai SDK's stream, unchanged, with a ``Message`` built alongside.

Chat completion chunks map through the ``openai-chat`` dialect and Responses events through
``openai-responses``, told apart by the first object. The SDK consumes ``[DONE]`` itself, so
a chat stream is judged by its finish reason alone (no end-marker warning). The SDK raises
``openai.APIError`` with the error object as ``body`` for an error inside the stream: that
fails the message with the provider's error; an error without a body (``APIConnectionError``,
a timeout) interrupts it.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable
from typing import Any, TypeVar, overload

from ..dialects import Dialect
from ..dialects.openai_chat import OpenAIChatDialect
from ..dialects.openai_responses import OpenAIResponsesDialect
from .tracked import AsyncTrackedStream, TrackedStream

__all__ = ["OpenAIAdapter", "from_openai"]

T = TypeVar("T")


class OpenAIAdapter:
    expect_end_marker = False

    def __init__(self) -> None:
        self.dialect: Dialect | None = None

    def dialect_for(self, payload: dict[str, Any]) -> Dialect:
        if self.dialect is None:
            kind = payload.get("type")
            responses = isinstance(kind, str) and (kind.startswith("response.") or kind == "error")
            self.dialect = OpenAIResponsesDialect() if responses else OpenAIChatDialect()
        return self.dialect

    def payload(self, obj: Any) -> dict[str, Any] | None:
        return _as_dict(obj)

    def error_payload(self, exc: BaseException) -> dict[str, Any] | None:
        body = getattr(exc, "body", None)
        if not isinstance(body, dict):
            return None
        return (self.dialect or OpenAIChatDialect()).wrap_error(body)


def _as_dict(obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict):
        return obj
    to_dict = getattr(obj, "to_dict", None)
    if to_dict is not None:  # the Stainless SDKs' public dump: API field names, set fields only
        found: dict[str, Any] = to_dict(warnings=False)
        return found
    dumped: dict[str, Any] = obj.model_dump()
    return dumped


@overload
def from_openai(stream: AsyncIterable[T], *, trace: bool = True) -> AsyncTrackedStream[T]: ...


@overload
def from_openai(stream: Iterable[T], *, trace: bool = True) -> TrackedStream[T]: ...


def from_openai(
    stream: Iterable[T] | AsyncIterable[T], *, trace: bool = True
) -> TrackedStream[T] | AsyncTrackedStream[T]:
    """Wrap ``client.chat.completions.create(..., stream=True)`` or
    ``client.responses.create(..., stream=True)`` (sync or async)."""
    if hasattr(stream, "__aiter__"):
        return AsyncTrackedStream(stream, OpenAIAdapter(), trace=trace)
    return TrackedStream(stream, OpenAIAdapter(), trace=trace)
