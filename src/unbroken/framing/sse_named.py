"""The hot path for SSE blocks of one ``event: NAME`` line and one ``data: VALUE`` line.

The shape of every Anthropic Messages and OpenAI Responses stream, mixed freely with lone
``data:`` blocks. ``SSEDecoder.receive_data`` hands a read here when its blocks are not all lone
``data:`` lines; a return of -1 means some block has another shape, and the general path
(``BlockReader``) reads the same bytes from the same state: nothing here changes the decoder.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .sse_blocks import BlockReader, ServerSentEvent, new_event

__all__ = ["EVENT_SEP", "NamedBlocks"]

_CR, _LF = 0x0D, 0x0A
# The separators the named-event path splits on, indexed by ``cr`` (without and with CR in the
# stream): before a block's "event: " line, between its name and its "data: " line, and before a
# lone "data: " line.
EVENT_SEP = (b"\n\nevent: ", b"\r\n\r\nevent: ")
_SEPARATORS = (
    (EVENT_SEP[0], b"\ndata: ", b"\n\ndata: "),
    (EVENT_SEP[1], b"\r\ndata: ", b"\r\n\r\ndata: "),
)


class NamedBlocks(BlockReader):
    """The named-event hot path, as methods of the decoder (it reads the decoder's last event
    ID and decoding mode)."""

    __slots__ = ()
    _decode: Callable[[bytes], str]  # set by SSEDecoder: strict or replacing UTF-8

    def _event_blocks(
        self,
        joined: bytes,
        start: int,
        lead: int,
        value_end: int,
        cr: bool,
        events: list[ServerSentEvent],
    ) -> int:
        """The hot path for blocks of one ``event: `` line and one ``data: `` line.

        Reads the complete blocks of ``joined`` from ``start`` (the first one preceded by
        ``lead`` swallowed LFs) to the one whose value ends at ``value_end``, each either
        ``event: NAME`` + ``data: VALUE`` or a lone ``data: VALUE`` line, all with ``cr``'s line
        ends. Returns where the last one ends, or -1 if some block has another shape: then
        ``events`` is to be dropped and the general path reads the same bytes.

        The blocks are split apart on the separator before an ``event:`` line, and each piece
        on the first one before a ``data:`` line (name, then value); a value that still holds
        a line ending is split on the separator before a lone ``data:`` line. A name or value
        that then holds a line ending means some block had another shape. An empty name
        (``event: ``, which dispatches "message") is left to the general path, as is any
        decoding error, so that the field rules stay in ``sse_blocks``.
        """
        at = start + lead
        event_sep, name_end, data_sep = _SEPARATORS[cr]
        if joined.startswith(b"event: ", at):
            pieces = joined[at + 7 : value_end].split(event_sep)
        elif joined.startswith(b"data: ", at):
            # Lone "data:" blocks first (the one the data-lines loop stopped at, and any after).
            pieces = joined[at + 6 : value_end].split(event_sep)
            start = self._data_lines(joined, start, lead, pieces[0].split(data_sep), cr, events)
            if start < 0:
                return -1
            lead = 0
            del pieces[0]
        else:
            return -1
        last_id = self._last_event_id
        new, cls, decode = new_event, ServerSentEvent, self._decode
        append = events.append
        # The "event" field rule (the type is the value, "message" if it is empty) lives in
        # sse_blocks; only non-empty names come here, so the type is the name as it stands.
        # A block is "event: " NAME name_end VALUE, then LF LF or CR LF CR LF (the first one
        # after ``lead`` swallowed LFs): a piece (NAME name_end VALUE) and this much. The last
        # one may have no LF after its CR (yet): ``receive_data`` corrects it.
        later = 11 if cr else 9
        size = later + lead
        lf = _LF
        for piece in pieces:
            name, found, value = piece.partition(name_end)
            if not name or not found or lf in name or (cr and _CR in name):
                return -1
            if lf in value or (cr and _CR in value):
                # Lone "data:" blocks follow this one (or the shape is another).
                value, *lone = value.split(data_sep)
                if lf in value or (cr and _CR in value):
                    return -1
                stop = start + size + len(name) + len(name_end) + len(value)
                append(new(cls, (decode(name), decode(value), last_id, None, None, stop - start,
                                 joined[start:stop])))  # fmt: skip
                start = self._data_lines(joined, stop, 0, lone, cr, events)
                if start < 0:
                    return -1
                size = later
                continue
            stop = start + size + len(piece)
            append(new(cls, (decode(name), decode(value), last_id, None, None, stop - start,
                             joined[start:stop])))  # fmt: skip
            start = stop
            size = later
        return start

    def _data_lines(
        self,
        joined: bytes,
        start: int,
        lead: int,
        values: Sequence[bytes],
        cr: bool,
        events: list[ServerSentEvent],
    ) -> int:
        """Lone ``data:`` blocks among named ones: ``receive_data``'s loop, without the split.

        ``values`` are the blocks' values, the first block at ``start`` preceded by ``lead``
        swallowed LFs. Returns where the last one ends, or -1 if a value holds a line ending.
        """
        size = 10 if cr else 8  # "data: " VALUE, then LF LF or CR LF CR LF
        last_id = self._last_event_id
        for value in values:
            if _LF in value or (cr and _CR in value):
                return -1
            stop = start + lead + size + len(value)
            events.append(new_event(ServerSentEvent, ("message", self._decode(value), last_id,
                                                      None, None, stop - start,
                                                      joined[start:stop])))  # fmt: skip
            start = stop
            lead = 0
        return start
