"""An optional accelerator for the two block shapes that make up nearly every LLM stream.

A block of one ``data: VALUE`` line (OpenAI chat deltas), or of ``event: NAME`` then ``data:
VALUE`` (Anthropic Messages, OpenAI Responses), mixed freely, with LF or CRLF line ends.
``read_shaped`` reads a region of complete blocks in a few C calls (split on the blank lines) and
returns the events and the bytes used, or None when some block has another shape, an empty
name, or invalid UTF-8. It changes no state, so on None the field reader reads the same bytes;
it must give exactly what the field reader gives (a property test holds it to that).
"""

from __future__ import annotations

from collections.abc import Callable

from .sse_fields import ServerSentEvent, new_event

__all__ = ["read_shaped"]

_CR, _LF = 0x0D, 0x0A


# Per line-end style (LF, CR LF): the blank line between blocks, what ends an event name, and
# what lies between two blocks of each shape.
_STYLES = (
    (b"\n\n", b"\ndata: ", b"\n\ndata: ", b"\n\nevent: "),
    (b"\r\n\r\n", b"\r\ndata: ", b"\r\n\r\ndata: ", b"\r\n\r\nevent: "),
)


def read_shaped(
    joined: bytes, end: int, lead: int, cr: bool, last_id: str, decode: Callable[[bytes], str]
) -> tuple[list[ServerSentEvent], int] | None:
    """Events of the complete blocks ``joined[:end]`` (the first after ``lead`` swallowed LFs),
    and where the blocks read end; or None if they are not all of one of the two shapes.

    ``cr``: a CR was seen in the stream, so lines end in CR LF. If the blocks end at the CR of
    a blank line, the last block ends there; if nothing after it has arrived (``end`` is the
    length of ``joined``) it is left unread: the next byte decides whether it takes an LF.
    """
    blank, name_end, data_sep, event_sep = _STYLES[cr]
    # A last block without the LF after its CR is read as if it had one, then cut back.
    short = cr and joined[end - 4 : end] != blank
    if short and joined[end - 3 : end] != b"\r\n\r":
        return None
    # Every block starts with the same line prefix: the blocks are split apart on the blank
    # line and that prefix, so that a piece is NAME name_end VALUE, or VALUE.
    if joined.startswith(b"data: ", lead):
        named, sep = False, data_sep
    elif joined.startswith(b"event: ", lead):
        named, sep = True, event_sep
    else:
        return None
    extra = len(sep)
    pieces = joined[lead + extra - len(blank) : end + short - len(blank)].split(sep)
    events: list[ServerSentEvent] = []
    append = events.append
    new, cls = new_event, ServerSentEvent
    start = 0
    size = extra + lead  # bytes of a block besides its piece
    try:
        if named:
            for piece in pieces:
                name, found, value = piece.partition(name_end)
                if not name or not found or _LF in name or _LF in value:
                    return None  # another line, or a block of the other shape
                if cr and (_CR in name or _CR in value):
                    return None
                stop = start + size + len(piece)
                append(new(cls, (decode(name), decode(value), last_id, None, None, stop - start,
                                 joined[start:stop])))  # fmt: skip
                start = stop
                size = extra
        else:
            for value in pieces:
                if _LF in value or (cr and _CR in value):
                    return None
                stop = start + size + len(value)
                append(new(cls, ("message", decode(value), last_id, None, None, stop - start,
                                 joined[start:stop])))  # fmt: skip
                start = stop
                size = extra
    except UnicodeDecodeError:
        return None
    if short:
        last = events.pop()
        if end == len(joined):
            return events, end + 1 - last[5]  # the next byte decides whether an LF is its own
        append(new(cls, (*last[:5], last[5] - 1, last[6][:-1])))
    return events, end
