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
    if cr and joined[end - 4 : end] != blank:
        if joined[end - 3 : end] != b"\r\n\r":
            return None
        stop = end - 3
    else:
        stop = end - len(blank)  # in an LF-only stream every block ends in LF LF
    # Every block starts with the same line prefix: the blocks are split apart on the blank
    # line and that prefix, so that a piece is NAME name_end VALUE, or VALUE.
    if joined.startswith(b"data: ", lead):
        named, sep = False, data_sep
    elif joined.startswith(b"event: ", lead):
        named, sep = True, event_sep
    else:
        return None
    extra = len(sep)
    events: list[ServerSentEvent] = []
    append = events.append
    new, cls = new_event, ServerSentEvent
    event_type = "message"
    start = 0
    size = extra + lead
    try:
        for value in joined[lead + len(sep) - len(blank) : stop].split(sep):
            piece = len(value)
            if named:
                name, found, value = value.partition(name_end)
                if not name or not found or _LF in name or (cr and _CR in name):
                    return None
                event_type = decode(name)
            if _LF in value or (cr and _CR in value):
                return None  # another line, or a block of the other shape
            stop = start + size + piece
            if stop > end:
                stop = end  # the last block ends at its CR, without an LF
            append(new(cls, (event_type, decode(value), last_id, None, None, stop - start,
                             joined[start:stop])))  # fmt: skip
            start = stop
            size = extra
    except UnicodeDecodeError:
        return None
    if end == len(joined) and joined[end - 1] == _CR:
        start -= events.pop()[5]  # the last block waits for the next byte: is an LF its own?
    return events, start
