"""Tool calls assembled from their deltas.

A call's arguments arrive as fragments of JSON text. A delta belongs to the call its id names;
one without an id to the call at its index (the provider's position for the call). A new id at
an index another call holds is a new call: some providers (Ollama's OpenAI-compatible API) give
every parallel call index 0, and keyed by index alone they would merge into one. The arguments
are kept as a list of parts and joined on access (receiving stays linear in the body), and
parsed once, when the finish reason or the close comes. A resume may continue a call that the
interruption had closed: its arguments are then open again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._jsonparse import loads
from .events import ToolCallDelta

__all__ = ["ToolCall", "ToolCalls", "joined"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call assembled from its deltas: ``ToolCall(id, name, arguments, value)``.
    ``arguments`` is the exact JSON text received; ``value`` is it parsed (``{}`` for empty
    arguments), or ``None`` until the call is complete or when the text is not valid JSON (a
    ``tool_arguments`` warning says so). ``index`` is the provider's position for the call (a
    content-block index for Anthropic); it orders the calls but is not part of their value."""

    id: str | None
    name: str | None
    arguments: str
    value: Any = None
    index: int = field(default=0, compare=False, kw_only=True)


class _Parts:
    __slots__ = ("arguments", "complete", "id", "index", "name", "parts", "value")

    def __init__(self, index: int) -> None:
        self.index = index
        self.id: str | None = None
        self.name: str | None = None
        self.parts: list[str] = []
        self.arguments: str | None = None  # joined once complete
        self.complete = False
        self.value: Any = None


class ToolCalls:
    """The calls of one message, in the order their first delta came."""

    __slots__ = ("_by_id", "_by_index", "_calls")

    def __init__(self) -> None:
        self._calls: list[_Parts] = []
        self._by_index: dict[int, _Parts] = {}  # the latest call at each index
        self._by_id: dict[str, _Parts] = {}

    def add(self, event: ToolCallDelta) -> str | None:
        """Add one delta; returns a warning when it reuses another call's index."""
        reused = None
        call_id = event.id
        parts = self._by_id.get(call_id) if call_id is not None else None
        if parts is None:
            parts = self._by_index.get(event.index)
            if parts is not None and call_id is not None and parts.id not in (None, call_id):
                reused = (f"tool call {call_id!r} reuses index {event.index} of call "
                          f"{parts.id!r}: kept as a call of its own")
                parts = None
        if parts is None:
            parts = _Parts(event.index)
            self._calls.append(parts)
            self._by_index[event.index] = parts
        elif parts.complete:  # a resume continues a call that the interruption had closed
            parts.complete = False
            parts.parts = [parts.arguments or ""]
            parts.value = None
        if call_id is not None and parts.id is None:
            parts.id = call_id
            self._by_id[call_id] = parts
        if event.name is not None and parts.name is None:
            parts.name = event.name
        if event.arguments:
            parts.parts.append(event.arguments)
        return reused

    def complete(self) -> list[str]:
        """Close every open call and parse its arguments; what could not be parsed, said."""
        problems = []
        for parts in self._calls:
            if parts.complete:
                continue
            parts.complete = True
            arguments = parts.arguments = joined(parts.parts)
            if not arguments:
                parts.value = {}
                continue
            try:
                parts.value = loads(arguments)
            except ValueError as exc:
                problems.append(f"tool call {parts.index} arguments are not JSON: {exc}")
        return problems

    def calls(self) -> list[ToolCall]:
        out = []
        for parts in self._calls:
            arguments = parts.arguments if parts.complete else joined(parts.parts)
            out.append(ToolCall(
                parts.id, parts.name, arguments if arguments is not None else "", parts.value,
                index=parts.index,
            ))
        return out


def joined(parts: list[str]) -> str:
    """Join in place, so the next access only joins what came since."""
    if len(parts) > 1:
        whole = "".join(parts)
        parts.clear()
        parts.append(whole)
    return parts[0] if parts else ""
