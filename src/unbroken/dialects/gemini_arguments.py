"""Vertex AI's streamed function-call arguments (``streamFunctionCallArguments``) as JSON text.

With that option a ``functionCall`` part names the function and says ``willContinue: true``;
later parts carry ``partialArgs``: each a JSON path (RFC 9535, ``$.recipe.steps[0]``) and one
value (``stringValue``, ``numberValue``, ``boolValue`` or ``nullValue``). A string may come in
pieces: a piece with ``willContinue: true`` is followed by more of the same path (Vertex ends
each string with an empty piece). The call ends at the first part without ``willContinue``
(Vertex sends an empty ``functionCall: {}`` for that, or leaves the flag off its last piece).

``StreamedArguments`` writes the values as the JSON text of the arguments object, piece by
piece, in the order they come, so the receiver assembles the call from text fragments as for
every other provider. The paths arrive in document order (the model writes the JSON left to
right); a path that goes back into an object or array already closed cannot be written as text
in order and is refused with a ``PayloadError`` naming it. A string's closing quote is held
until the next path or the end, so a later piece of the same string still joins it.
"""

from __future__ import annotations

import re
from typing import Any, Final

from .._jsonparse import dumps_compact
from ..errors import PayloadError

__all__ = ["StreamedArguments", "parse_path"]

Segment = str | int

# RFC 9535 segments: .name (member-name-shorthand), ['name'] / ["name"], [index]
_SEGMENT: Final = re.compile(
    r"""\.(?P<name>[A-Za-z_\u0080-\U0010FFFF][A-Za-z0-9_\u0080-\U0010FFFF]*)"""
    r"""|\[(?P<index>0|[1-9][0-9]*)\]"""
    r"""|\['(?P<single>(?:[^'\\]|\\.)*)'\]"""
    r"""|\["(?P<double>(?:[^"\\]|\\.)*)"\]"""
)
_ESCAPE: Final = re.compile(r"\\(u[0-9A-Fa-f]{4}|.)")
_INF: Final = float("inf")
_ESCAPES: Final = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "/": "/",
                   "\\": "\\", "'": "'", '"': '"'}


def parse_path(path: Any) -> tuple[Segment, ...]:
    """The segments of a JSON path below ``$``; ``PayloadError`` unless it names a member or
    element of the arguments object (``$`` alone, wildcards, filters and slices do not)."""
    if not isinstance(path, str) or not path.startswith("$"):
        raise PayloadError(f"gemini: partialArgs jsonPath {path!r} is not a JSON path")
    segments: list[Segment] = []
    position = 1
    while position < len(path):
        match = _SEGMENT.match(path, position)
        if match is None:
            raise PayloadError(
                f"gemini: partialArgs jsonPath {path!r}: cannot read it at character {position}"
            )
        name, index = match["name"], match["index"]
        if name is not None:
            segments.append(name)
        elif index is not None:
            segments.append(int(index))
        else:
            quoted = match["single"] if match["single"] is not None else match["double"]
            segments.append(_ESCAPE.sub(_unescape, quoted))
        position = match.end()
    if not segments or not isinstance(segments[0], str):
        raise PayloadError(
            f"gemini: partialArgs jsonPath {path!r} names no member of the arguments object"
        )
    return tuple(segments)


def _unescape(match: re.Match[str]) -> str:
    escaped = match[1]
    if escaped[0] == "u" and len(escaped) == 5:
        return chr(int(escaped[1:], 16))
    return _ESCAPES.get(escaped, escaped)


class _Container:
    """An object or array whose JSON text is open: what it holds so far."""

    __slots__ = ("count", "keys", "segment")

    def __init__(self, segment: Segment | None, is_array: bool) -> None:
        self.segment = segment  # its key or index in the parent; None for the root
        self.keys: set[str] | None = None if is_array else set()
        self.count = 0  # members or elements written


class StreamedArguments:
    """The JSON text of one call's arguments, written as its ``partialArgs`` come."""

    __slots__ = ("_leaf", "_stack", "_string_open")

    def __init__(self) -> None:
        self._stack: list[_Container] = []  # open containers, the root object first
        self._leaf: tuple[Segment, ...] | None = None  # the path written last
        self._string_open = False  # its string's closing quote is not written yet

    def add(self, partial: Any) -> str:
        """The text one ``PartialArg`` adds; ``""`` for one that carries no value."""
        if not isinstance(partial, dict):
            raise PayloadError(f"gemini: a partialArgs item is not an object: {partial!r}")
        path = parse_path(partial.get("jsonPath"))
        value = _value_of(partial)
        if value is None:
            return ""
        is_string = "stringValue" in partial and isinstance(partial["stringValue"], str)
        if is_string and self._string_open and path == self._leaf:
            return value[1:-1]  # the next piece of the string written last
        text = self._navigate(path)
        self._leaf = path
        if is_string:
            self._string_open = True
            return text + value[:-1]
        return text + value

    def add_member(self, key: Any, value: Any) -> str:
        """The text of a whole member of the arguments object (``args`` on a streamed part)."""
        if not isinstance(key, str):
            raise PayloadError(f"gemini: functionCall args key is not a string: {key!r}")
        text = self._navigate((key,))
        self._leaf = (key,)
        return text + dumps_compact(value)

    def close(self) -> str:
        """The text that ends the arguments object (``{}`` when no value came)."""
        if not self._stack:
            return "{}"
        text = '"' if self._string_open else ""
        self._string_open = False
        while self._stack:
            text += "}" if self._stack.pop().keys is not None else "]"
        return text

    def _navigate(self, path: tuple[Segment, ...]) -> str:
        """Close what the new path leaves, open what it enters, and write its key."""
        text = '"' if self._string_open else ""
        self._string_open = False
        stack = self._stack
        if not stack:
            stack.append(_Container(None, False))
            text += "{"
        # keep the open containers the path still runs through
        depth = 1
        while (depth < len(stack) and depth < len(path)
               and stack[depth].segment == path[depth - 1]):
            depth += 1
        while len(stack) > depth:
            text += "}" if stack.pop().keys is not None else "]"
        for position in range(depth - 1, len(path)):
            text += self._member(path, position)
            if position < len(path) - 1:
                is_array = isinstance(path[position + 1], int)
                stack.append(_Container(path[position], is_array))
                text += "[" if is_array else "{"
        return text

    def _member(self, path: tuple[Segment, ...], position: int) -> str:
        """The comma and key that start a new member or element of the innermost container."""
        container, segment = self._stack[-1], path[position]
        keys = container.keys
        if keys is None:
            if not isinstance(segment, int) or segment != container.count:
                raise self._out_of_order(path, f"expected element [{container.count}]")
        else:
            if not isinstance(segment, str) or segment in keys:
                raise self._out_of_order(path, f"member {segment!r} is already written")
            keys.add(segment)
        text = "," if container.count else ""
        container.count += 1
        return text + (dumps_compact(segment) + ":" if keys is not None else "")

    def _out_of_order(self, path: tuple[Segment, ...], why: str) -> PayloadError:
        return PayloadError(
            f"gemini: partialArgs path {_render(path)} goes back into arguments already "
            f"written ({why}): they cannot be kept in order"
        )


def _value_of(partial: dict[str, Any]) -> str | None:
    """The JSON text of a PartialArg's value (a string's with both quotes), or None."""
    if "stringValue" in partial:
        value = partial["stringValue"]
        if not isinstance(value, str):
            raise PayloadError(f"gemini: partialArgs stringValue is not a string: {value!r}")
        return dumps_compact(value)
    if "numberValue" in partial:
        value = partial["numberValue"]
        if type(value) not in (int, float) or value != value or value in (_INF, -_INF):
            raise PayloadError(f"gemini: partialArgs numberValue is not a number: {value!r}")
        return dumps_compact(value)
    if "boolValue" in partial:
        value = partial["boolValue"]
        if type(value) is not bool:
            raise PayloadError(f"gemini: partialArgs boolValue is not a boolean: {value!r}")
        return "true" if value else "false"
    if "nullValue" in partial:  # google.protobuf.NullValue: "NULL_VALUE", or null
        return "null"
    return None


def _render(path: tuple[Segment, ...]) -> str:
    return "$" + "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in path)
