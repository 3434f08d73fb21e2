"""``from_anthropic``: the anthropic SDK's stream, unchanged, with a ``Message`` built alongside.

Takes the raw event stream of ``client.messages.create(..., stream=True)``, or the helper of
``client.messages.stream(...)`` (the ``MessageStream`` inside its ``with`` block, or the manager
itself, which is then entered on first use and exited by ``close()``). The helper also yields
events it makes up from the raw ones (``text``, ``input_json``, ``thinking``, ``signature``,
``citation``); those are yielded but not committed, so nothing is counted twice. The SDK drops
``ping`` events before they reach us. An ``error`` event is raised by the SDK as an
``APIStatusError`` whose ``body`` is the event: that fails the message with the provider's error.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Iterable
from typing import Any, Final, Protocol, TypeVar, overload

from ..dialects.anthropic import AnthropicDialect
from .openai import _as_dict
from .tracked import AsyncTrackedStream, TrackedStream

__all__ = ["HELPER_EVENTS", "AnthropicAdapter", "from_anthropic"]

T = TypeVar("T")

HELPER_EVENTS: Final = frozenset({"text", "input_json", "thinking", "signature", "citation"})
"""Event types the ``messages.stream`` helper derives from raw events: not on the wire."""


class _Manager(Protocol):
    """``client.messages.stream(...)`` before its ``with`` block."""

    def __enter__(self) -> Any: ...


class _AsyncManager(Protocol):
    def __aenter__(self) -> Awaitable[Any]: ...


class AnthropicAdapter:
    expect_end_marker = True

    def __init__(self) -> None:
        self.dialect = AnthropicDialect()

    def dialect_for(self, payload: dict[str, Any]) -> Any:
        return self.dialect

    def payload(self, obj: Any) -> dict[str, Any] | None:
        kind = getattr(obj, "type", None)
        if kind in HELPER_EVENTS:
            return None
        if kind == "message_stop":  # the helper's version carries the whole message: skip it
            return {"type": "message_stop"}
        if kind == "content_block_stop":
            return {"type": "content_block_stop", "index": getattr(obj, "index", None)}
        return _as_dict(obj)

    def error_payload(self, exc: BaseException) -> dict[str, Any] | None:
        body = getattr(exc, "body", None)
        if isinstance(body, dict) and body.get("type") == "error":
            return body
        return None


@overload
def from_anthropic(stream: AsyncIterable[T], *, trace: bool = True) -> AsyncTrackedStream[T]: ...


@overload
def from_anthropic(stream: Iterable[T], *, trace: bool = True) -> TrackedStream[T]: ...


@overload
def from_anthropic(stream: _AsyncManager, *, trace: bool = True) -> AsyncTrackedStream[Any]: ...


@overload
def from_anthropic(stream: _Manager, *, trace: bool = True) -> TrackedStream[Any]: ...


def from_anthropic(stream: Any, *, trace: bool = True) -> Any:
    """Wrap an anthropic stream (sync or async): raw events or the ``messages.stream`` helper."""
    if hasattr(stream, "__aiter__") or hasattr(stream, "__aenter__"):
        return AsyncTrackedStream(stream, AnthropicAdapter(), trace=trace)
    return TrackedStream(stream, AnthropicAdapter(), trace=trace)
