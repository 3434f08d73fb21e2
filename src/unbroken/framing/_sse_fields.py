"""One complete SSE block becomes an event: the WHATWG field rules, written once.

Lines, colons and the space after a colon are found at byte level (none occurs inside a UTF-8
sequence); each value is decoded once, so a block takes effect whole or, on an error, not at all.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["COPY_LIMIT", "FieldReader", "ServerSentEvent", "new_event"]

# A one-line data block over this many bytes is decoded from a view of the block, not a copy.
COPY_LIMIT = 1 << 16
# The largest retry value (ms) taken: browsers read it into a 64-bit unsigned integer and
# ignore a larger one; so do we (21 significant digits tell it: int() of 4,301 digits raises).
MAX_RETRY = 2**64 - 1


class ServerSentEvent(NamedTuple):
    """One dispatched event. ``raw`` is its block's bytes on the wire (BOM excluded): evidence,
    not value, so events compare and hash by the six fields of the contract alone."""

    event: str = "message"
    data: str = ""
    id: str = ""
    block_id: str | None = None
    retry: int | None = None
    nbytes: int = 0
    raw: bytes = b""

    def __eq__(self, other: object) -> bool:
        return self[:6] == other[:6] if isinstance(other, tuple) else NotImplemented

    def __ne__(self, other: object) -> bool:
        return self[:6] != other[:6] if isinstance(other, tuple) else NotImplemented

    def __hash__(self) -> int:
        return hash(self[:6])


# Builds an event from a ready tuple: the NamedTuple's own ``__new__`` is Python code, 4x slower.
new_event = tuple.__new__


class FieldReader:
    """Interprets complete blocks; holds the last event ID and the reconnection time."""

    __slots__ = ("copy_limit", "errors", "last_event_id", "retry")

    def __init__(self, errors: str, last_event_id: str, copy_limit: int = COPY_LIMIT) -> None:
        self.errors = errors
        self.last_event_id = last_event_id
        self.retry: int | None = None
        self.copy_limit = copy_limit

    def read(
        self, region: bytes, start: int, text: int, end: int, *, dispatch: bool = True
    ) -> ServerSentEvent | None:
        """The event of the block ``region[start:end]`` (lines from ``text``, past a swallowed
        LF), or None. ``dispatch=False``: the lines of a block cut by EOF; only retry counts."""
        errors = self.errors if dispatch else "replace"
        event_type = ""
        data: list[bytes | memoryview] = []
        block_id: str | None = None
        retry: int | None = None
        for name, value in self._fields(region, text, end):
            if name == b"data":
                data.append(value)  # decoded once, joined, below
            elif name == b"event":
                event_type = str(value, "utf-8", errors)
            elif name == b"id":
                ident = str(value, "utf-8", errors)
                if "\x00" not in ident:
                    block_id = ident
            elif name == b"retry" and (digits := bytes(value)).isdigit():
                if (ms := int(digits.lstrip(b"0")[:21] or b"0")) <= MAX_RETRY:
                    retry = ms  # (a value too large, as an invalid one, leaves an earlier one)
            elif errors == "strict":  # a comment (no name), an unknown field, a bad retry: checked
                str(name + b":" + value, "utf-8")
        text_data = str(data[0] if len(data) == 1 else b"\n".join(data), "utf-8", errors)
        self.retry = self.retry if retry is None else retry
        if not dispatch:
            return None
        self.last_event_id = self.last_event_id if block_id is None else block_id
        if not data:
            return None
        fields = (event_type or "message", text_data, self.last_event_id, block_id, retry)
        return new_event(ServerSentEvent, (*fields, end - start, region[start:end]))

    def _fields(self, region: bytes, text: int, end: int) -> list[tuple[bytes, bytes | memoryview]]:
        """(name, value) of each line up to the blank one; a comment's name is empty."""
        if end - text > self.copy_limit and region.startswith(b"data:", text):
            eol = end - 4 + len(region[end - 4 : end].rstrip(b"\r\n"))  # the last line's end
            if region.find(b"\n", text, eol) < 0 and region.find(b"\r", text, eol) < 0:
                # One huge data line: its value stays in place, a view of the block.
                at = text + 5 + (region[text + 5 : text + 6] == b" ")
                return [(b"data", memoryview(region)[at:eol])]
        fields: list[tuple[bytes, bytes | memoryview]] = []
        for line in region[text:end].splitlines():  # one copy, then short lines
            if not line:
                break  # the blank line that ends the block
            name, _, value = line.partition(b":")
            fields.append((name, value[1:] if value[:1] == b" " else value))
        return fields
