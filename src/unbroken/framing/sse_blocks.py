"""Complete SSE blocks become events: the WHATWG field rules, read at byte level.

A block is everything up to and including its blank line. Lines, colons and the one space after
them are found at byte level, since none of CR, LF, ":" or " " occurs inside a UTF-8 sequence; each
value is decoded once, and a huge one in place. ``SSEDecoder`` cuts the blocks and holds the
stream; ``BlockReader`` is the part of it that reads them.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ..errors import DecodingError, EventTooLargeError

__all__ = ["BlockReader", "ServerSentEvent"]

_CR, _LF, _COLON = 0x0D, 0x0A, 0x3A
# The first block end at or after a position, in a region that contains a CR.
_BLOCK_END = re.compile(rb"\n[\r\n]|\r\r")
# What follows the first line of a block that has no other: its line end and the blank line
# (with the LF after a CR that follows an LF, see ``SSEDecoder``).
_LAST_LINE_ENDS = frozenset(
    {b"\n\n", b"\n\r", b"\n\r\n", b"\r\r", b"\r\n\r", b"\r\n\r\n", b"\r\n\n"}
)
# Blocks and values up to this size are sliced out and decoded; longer ones are decoded in place.
_COPY_LIMIT = 1 << 16
# Regions of complete blocks without CR up to this size are read as one list of lines.
_LINES_LIMIT = 1 << 16


class ServerSentEvent(NamedTuple):
    """One dispatched event. ``raw`` is its block's bytes on the wire (BOM excluded).

    Events compare (and hash) by the six fields of the contract, ``event`` to ``nbytes``:
    ``raw`` is evidence, not value, so an event built from those six equals the decoded one.
    """

    event: str = "message"
    data: str = ""
    id: str = ""
    block_id: str | None = None
    retry: int | None = None
    nbytes: int = 0
    raw: bytes = b""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, tuple):
            return NotImplemented
        return self[:6] == other[:6]

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, tuple):
            return NotImplemented
        return self[:6] != other[:6]

    def __hash__(self) -> int:
        return hash(self[:6])


# Builds an event from a ready tuple: the NamedTuple's own ``__new__`` is Python code, 4x slower.
new_event = tuple.__new__


def _decode(src: bytes, start: int, stop: int, errors: str) -> str:
    if stop - start < _COPY_LIMIT:
        return src[start:stop].decode("utf-8", errors)
    with memoryview(src) as view:  # a huge value is decoded in place, not copied first
        return str(view[start:stop], "utf-8", errors)


class BlockReader:
    """Reads complete blocks into events, keeping the last event ID and the reconnection time.

    The state it needs is set by ``SSEDecoder.__init__``: ``_errors`` ("strict" or "replace"),
    ``_max`` (max_event_size), ``_last_event_id``, ``_retry`` and ``_cr`` (a CR was seen).
    """

    __slots__ = ("_cr", "_errors", "_last_event_id", "_max", "_retry")

    _cr: bool
    _errors: str
    _last_event_id: str
    _max: int
    _retry: int | None

    def _too_large(
        self, offset: int, events: list[ServerSentEvent] | None = None
    ) -> EventTooLargeError:
        return EventTooLargeError(
            f"event larger than max_event_size={self._max} bytes",
            limit=self._max,
            offset=offset,
            events=events,
        )

    def _blocks(
        self,
        region: bytes,
        base: int,
        swallow_lf: bool,
        events: list[ServerSentEvent],
        hold: bool = False,
    ) -> int:
        """Decode a region of complete blocks one block at a time (any shape).

        A block that ends in LF CR also takes the LF after its CR, if one follows. ``hold``:
        no byte after the region has arrived yet, so a last block that ends in LF CR is held
        (not decoded). The region may end with an LF after a CR that ends a block; a block that
        does not take it leaves it to the next one (a swallowed LF). Returns where the blocks
        read end: the region's length, or where the held block or that LF starts.
        """
        size = len(region)
        lf_only = not self._cr or _CR not in region
        if lf_only and size <= _LINES_LIMIT and size <= self._max and region[0] != _LF:
            self._lf_lines(region, base, events)  # no block can be huge or over the limit
            return size
        start = 0
        while start < size:
            text = start + 1 if swallow_lf and region[start] == _LF else start
            if text == size:
                break  # only the LF after the last block's CR: the next block swallows it
            if region[text] in (_CR, _LF):
                end = text + 1  # a blank line at the start of a block: nothing to interpret
                if text > start and region[text] == _CR:  # a swallowed LF, then CR: LF CR
                    if end < size:
                        end += region[end] == _LF
                    elif hold:
                        break
            else:
                if lf_only:
                    end = region.find(b"\n\n", text) + 2
                else:
                    match = _BLOCK_END.search(region, text)
                    assert match is not None  # the region ends at a block end
                    end = match.end()
                    if region[end - 1] == _CR and region[end - 2] == _LF:
                        # It ends in LF CR: the LF after that CR, if one follows, is its own.
                        if end < size:
                            end += region[end] == _LF
                        elif hold:
                            if end - start > self._max:
                                raise self._too_large(base + start)
                            break  # the next byte decides whether it takes an LF
                if end - start > self._max:
                    raise self._too_large(base + start)
                try:
                    event = self._block(region, start, text, end, lf_only)
                except UnicodeDecodeError:
                    raise self._decoding_error(region, text, end, base) from None
                if event is not None:
                    events.append(event)
            swallow_lf = region[end - 1] == _CR
            start = end
        return start

    def _lf_lines(self, region: bytes, base: int, events: list[ServerSentEvent]) -> None:
        """Decode a small region of complete blocks without CR as one list of lines.

        The same reading as ``_block``, without a call or a split per block.
        """
        errors = self._errors
        strict = errors == "strict"
        append = events.append
        start = pos = 0  # where the current block and the current line start
        event = "message"
        data: list[bytes] = []
        new_id: str | None = None
        retry: bytes | None = None
        try:
            for line in region.split(b"\n"):
                if line:
                    pos += len(line) + 1
                    if line[0] == _COLON:  # a comment
                        if strict:
                            line.decode()
                        continue
                    name, _, value = line.partition(b":")
                    if value[:1] == b" ":
                        value = value[1:]
                    if name == b"data":
                        data.append(value)  # decoded once, joined, at the blank line
                    elif name == b"event":
                        event = value.decode("utf-8", errors) or "message"
                    elif name == b"id":
                        ident = value.decode("utf-8", errors)
                        if "\x00" not in ident:
                            new_id = ident
                    elif name == b"retry":
                        if strict:
                            value.decode()
                        if value.isdigit():  # ASCII digits only, for bytes
                            retry = value
                    elif strict:
                        line.decode()  # an unknown field: ignored, but checked
                    continue
                if pos == len(region):
                    break  # what split finds after the last LF
                pos += 1  # a blank line: the block is complete
                if data:
                    text = b"\n".join(data).decode("utf-8", errors)
                if new_id is not None:
                    self._last_event_id = new_id
                if retry is not None:
                    self._retry = int(retry)
                if data:
                    append(
                        new_event(
                            ServerSentEvent,
                            (
                                event,
                                text,
                                self._last_event_id,
                                new_id,
                                None if retry is None else int(retry),
                                pos - start,
                                region[start:pos],
                            ),
                        )
                    )
                    data = []
                start = pos
                event = "message"
                new_id = None
                retry = None
        except UnicodeDecodeError:
            end = region.find(b"\n\n", start) + 2  # the block that failed
            raise self._decoding_error(region, start, end, base) from None

    def _block(
        self, region: bytes, start: int, pos: int, end: int, lf_only: bool
    ) -> ServerSentEvent | None:
        """Interpret the block ``region[start:end]``, whose lines start at ``pos``.

        Lines, colons and the one space after them are found at byte level (none of them occurs
        inside a UTF-8 sequence); values stay bytes until the block is complete, then each kind
        is decoded once. In strict mode comments and unknown fields are decoded too, so any
        invalid byte raises ``UnicodeDecodeError``, and nothing changes before the block is
        decoded: it takes effect as a whole.
        """
        if end - pos > _COPY_LIMIT:
            return self._huge_block(region, start, pos, end, lf_only)
        errors = self._errors
        strict = errors == "strict"
        event = "message"
        data: list[bytes] = []
        new_id: str | None = None
        retry: bytes | None = None
        block = region[pos:end]
        for line in block.split(b"\n") if lf_only else block.splitlines():
            if not line:
                break  # the blank line that ends the block
            if line[0] == _COLON:  # a comment
                if strict:
                    line.decode()
                continue
            name, _, value = line.partition(b":")
            if value[:1] == b" ":
                value = value[1:]
            if name == b"data":
                data.append(value)  # decoded once, joined, below
            elif name == b"event":
                event = value.decode("utf-8", errors) or "message"
            elif name == b"id":
                ident = value.decode("utf-8", errors)
                if "\x00" not in ident:
                    new_id = ident
            elif name == b"retry":
                if strict:
                    value.decode()
                if value.isdigit():  # ASCII digits only, for bytes
                    retry = value
            elif strict:
                line.decode()  # an unknown field: ignored, but checked
        text = b"\n".join(data).decode("utf-8", errors) if data else ""
        if new_id is not None:
            self._last_event_id = new_id
        if retry is not None:
            self._retry = int(retry)
        if not data:
            return None
        return new_event(
            ServerSentEvent,
            (
                event,
                text,
                self._last_event_id,
                new_id,
                None if retry is None else int(retry),
                end - start,
                region[start:end],
            ),
        )

    def _huge_block(
        self, region: bytes, start: int, pos: int, end: int, lf_only: bool
    ) -> ServerSentEvent | None:
        """``_block`` for a block over ``_COPY_LIMIT`` bytes: values are decoded in place.

        Lines, colons and the one space after them are found at byte level (none of them occurs
        inside a UTF-8 sequence), and each value is decoded once. A block of one line (plus its
        blank line) is read in place, so a huge line is never copied; a longer block is split
        into lines once. In strict mode comments and unknown fields are decoded too, in order,
        so any invalid byte raises ``UnicodeDecodeError`` in the first line that holds one.
        """
        eol = region.find(b"\n", pos, end)
        if not lf_only:
            cr = region.find(b"\r", pos, end)
            if cr >= 0 and (eol < 0 or cr < eol):
                eol = cr
        lines: list[tuple[bytes, int, int]]  # (bytes holding the line, start, stop)
        if region[eol:end] in _LAST_LINE_ENDS:
            lines = [(region, pos, eol)]
        else:
            lines = [(line, 0, len(line)) for line in region[pos:end].splitlines()]
        errors = self._errors
        strict = errors == "strict"
        event_type = ""
        data: list[str] = []
        block_id: str | None = None
        retry: int | None = None
        for src, first, stop in lines:
            if first == stop:
                break  # the blank line that ends the block
            colon = src.find(b":", first, stop)
            if colon == first:  # a comment
                if strict:
                    _decode(src, first, stop, errors)
                continue
            value_at = stop if colon < 0 else colon + 1
            if src[value_at : value_at + 1] == b" ":
                value_at += 1
            name = src[first : stop if colon < 0 else colon]
            if name == b"data":
                data.append(_decode(src, value_at, stop, errors))
            elif name == b"event":
                event_type = _decode(src, value_at, stop, errors)
            elif name == b"id":
                value = _decode(src, value_at, stop, errors)
                if "\x00" not in value:
                    block_id = value
            elif name == b"retry":
                value = _decode(src, value_at, stop, errors)
                if value.isascii() and value.isdigit():
                    retry = int(value)
            elif strict:
                _decode(src, first, stop, errors)  # an unknown field: ignored, but checked
        # The block takes effect as a whole (a decoding error above leaves no trace).
        if retry is not None:
            self._retry = retry
        if block_id is not None:
            self._last_event_id = block_id
        if not data:
            return None
        return new_event(
            ServerSentEvent,
            (
                event_type or "message",
                "\n".join(data),
                self._last_event_id,
                block_id,
                retry,
                end - start,
                region[start:end],
            ),
        )

    def _decoding_error(self, region: bytes, text: int, end: int, base: int) -> DecodingError:
        """The error for the first invalid byte of the block ``region[text:end]``."""
        with memoryview(region) as view:
            try:
                str(view[text:end], "utf-8")
            except UnicodeDecodeError as exc:
                offset = base + text + exc.start
                return DecodingError(
                    f"invalid UTF-8 at stream byte offset {offset}: {exc.reason}", offset=offset
                )
        raise AssertionError("the block decodes")  # pragma: no cover
