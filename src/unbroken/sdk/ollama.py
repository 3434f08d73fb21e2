"""``from_ollama``: the ollama SDK's stream, unchanged, with a ``Message`` built alongside.

Takes ``client.chat(..., stream=True)`` or ``client.generate(..., stream=True)`` from
``ollama.Client``, or the awaited same calls of ``ollama.AsyncClient``. Each ``ChatResponse`` /
``GenerateResponse`` is dumped back to its line (the wire's own snake_case keys) and mapped by
the ``ollama`` dialect: ``message.content`` / ``message.thinking`` / ``message.tool_calls`` for
chat, ``response`` / ``thinking`` for generate. The last line has ``done: true`` and
``done_reason``; a stream cut before it, or a done line without a reason, ends ``interrupted``.

Errors: the package raises ``ollama.ResponseError`` for an error status and for an in-stream
``{"error": ...}`` line; that fails the message with the provider's error text. Transport
failures (httpx errors, timeouts) and anything else interrupt it.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterable, Iterable
from typing import Any, TypeVar, overload

from ..dialects.ollama import OllamaDialect
from .tracked import AsyncTrackedStream, TrackedStream, is_sdk_error, refuse_unawaited

__all__ = ["OllamaAdapter", "from_ollama"]

T = TypeVar("T")


class OllamaAdapter:
    expect_end_marker = True

    def __init__(self) -> None:
        self.dialect = OllamaDialect()

    def dialect_for(self, payload: dict[str, Any]) -> Any:
        return self.dialect

    def payload(self, obj: Any) -> dict[str, Any] | None:
        if isinstance(obj, dict):
            return obj
        dumped: dict[str, Any] = obj.model_dump(mode="json", exclude_none=True)
        return dumped

    def error_payload(self, exc: BaseException) -> dict[str, Any] | None:
        if not is_sdk_error(exc, "ollama._types", "ResponseError"):
            return None
        # An error status never comes here (``status_error`` took it): this is an error line.
        return {"error": getattr(exc, "error", None) or str(exc)}


@overload
def from_ollama(stream: AsyncIterable[T], *, trace: bool = True) -> AsyncTrackedStream[T]: ...


@overload
def from_ollama(stream: Iterable[T], *, trace: bool = True) -> TrackedStream[T]: ...


def from_ollama(
    stream: Iterable[T] | AsyncIterable[T], *, trace: bool = True
) -> TrackedStream[T] | AsyncTrackedStream[T]:
    """Wrap ``client.chat(..., stream=True)`` or ``client.generate(..., stream=True)`` (sync,
    or awaited on an ``AsyncClient``)."""
    if inspect.isawaitable(stream):
        refuse_unawaited(stream, "from_ollama", "client.chat(..., stream=True)")
    if hasattr(stream, "__aiter__"):
        return AsyncTrackedStream(stream, OllamaAdapter(), trace=trace)
    return TrackedStream(stream, OllamaAdapter(), trace=trace)
