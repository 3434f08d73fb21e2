"""An optional accelerator for the block shapes of nearly every LLM stream.

A ``data: VALUE`` line (OpenAI chat), led by an ``event: NAME`` line (Anthropic, OpenAI
Responses), an ``id: ID`` line, or both in either order (an unbroken proxy); LF or CRLF line ends.
``read_shaped`` splits a region of such blocks in a few C calls and returns their events, or None
(another shape, an empty name, an ID with U+0000, invalid UTF-8): then the field reader reads the
same bytes (no state was changed). A property test holds it to giving what the field reader gives.
"""

from __future__ import annotations

from collections.abc import Callable

from ._sse_fields import ServerSentEvent, new_event

__all__ = ["read_shaped"]

_CR, _LF = 0x0D, 0x0A
_DATA, _EVENT, _ID = b"data: ", b"event: ", b"id: "
_ENDS = ((b"\n", b"\n\n", b"\ndata: "), (b"\r\n", b"\r\n\r\n", b"\r\ndata: "))  # by cr


def read_shaped(
    joined: bytes, end: int, lead: int, cr: bool, last_id: str, decode: Callable[[bytes], str]
) -> list[ServerSentEvent] | None:
    """Events of the complete blocks ``joined[:end]`` (the first after ``lead`` swallowed LFs),
    or None. ``cr``: a CR was seen, so lines end in CR LF; without one they all end in LF."""
    eol, blank, data_sep = _ENDS[cr]
    if cr and not joined.endswith(blank, 0, end):
        return None  # (rare: a last block held at its CR, or a CR CR block end)
    # Every block starts with the first block's first field: the region is split on the blank
    # line and that field's name, so a piece is the block without it.
    first = (_DATA if joined.startswith(_DATA, lead) else _EVENT if joined.startswith(_EVENT, lead)
             else _ID if joined.startswith(_ID, lead) else None)  # fmt: skip
    if first is None:
        return None
    sep = blank + first
    extra = len(sep)
    pieces = joined[lead + len(first) : end - len(blank)].split(sep)
    events: list[ServerSentEvent] = []
    append = events.append
    start, size = 0, extra + lead  # bytes of a block besides its piece
    try:
        if first is _DATA:  # a lone data line: one check a block
            for value in pieces:
                if _LF in value or (cr and _CR in value):
                    return None
                stop = start + size + len(value)
                append(new_event(ServerSentEvent, (
                    "message", decode(value), last_id, None, None, stop - start, joined[start:stop]
                )))
                start, size = stop, extra
            return events
        if first is _EVENT:  # event then data (Anthropic, Responses): one partition a block
            for piece in pieces:
                kind, found, value = piece.partition(data_sep)
                if not kind or not found or _LF in kind or _LF in value or (
                        cr and (_CR in kind or _CR in value)):  # fmt: skip
                    break
                stop = start + size + len(piece)
                append(new_event(ServerSentEvent, (
                    decode(kind), decode(value), last_id, None, None, stop - start,
                    joined[start:stop],
                )))
                start, size = stop, extra
            else:
                return events
            del events[:]  # another shape: the loop below reads them all again, or declines
            start, size = 0, extra + lead
        # The data line last, after the other of event and id or not (proxied streams).
        other = eol + (_ID if first is _EVENT else _EVENT)
        for piece in pieces:
            head, found, value = piece.partition(data_sep)
            line, two, second = head.partition(other)
            if not found or _LF in line or _LF in second or _LF in value or (
                    cr and (_CR in line or _CR in second or _CR in value)):  # fmt: skip
                return None
            name, ident = (line, second if two else None) if first is _EVENT else (
                second if two else None, line)  # fmt: skip
            if name == b"" or (ident is not None and 0 in ident):
                return None  # "message", an ignored ID: the field reader's cases
            if ident is not None:
                last_id = decode(ident)
            stop = start + size + len(piece)
            append(new_event(ServerSentEvent, (
                "message" if name is None else decode(name), decode(value), last_id,
                None if ident is None else last_id, None, stop - start, joined[start:stop],
            )))
            start, size = stop, extra
    except UnicodeDecodeError:
        return None
    return events
