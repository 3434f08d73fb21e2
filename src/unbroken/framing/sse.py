"""Server-sent events, decoded per WHATWG HTML "Interpreting an event stream".

Bytes are cut into blocks (everything up to and including a blank line) at byte level, and each
complete block is decoded once: CR and LF never occur inside a multi-byte UTF-8 sequence, so no
character can straddle a block boundary and no carry is needed.

Line endings are CRLF, LF or a lone CR. A CR that ends one read ends its line at once; if the next
read starts with LF, that LF is the second half of a CRLF and is swallowed. So that every chunking
gives identical events, the LF of a CRLF that *ends an event* is always counted in the next block's
``nbytes`` (an event dispatched on its CR cannot wait for an LF that may never come).

Where blocks end: every CR or LF ends a line, except that CR LF together end one line. So two
line-ending bytes in a row other than CR LF -- ``\\n\\n``, ``\\n\\r`` or ``\\r\\r`` -- mean the
second one ends an empty line, and a block ends right after it; so does a line ending at the very
start of a block. Only a read (and the pair its first byte makes with the last buffered byte) can
hold a new block end, so each read is searched once, backwards, for the last pair: everything
before it is complete blocks, decoded at once; the rest waits in the buffer. A read without a line
ending is only appended. The buffer is never searched again, and copied only when a block in it
is complete, so the work is linear for any chunking.

Two paths decode complete blocks. The hot path takes a read whose complete blocks are all single
``data: `` lines (LF LF or CR LF CR terminated: OpenAI-style deltas): it splits
them on the separator between two such lines and proves the shape as it goes (a value holding a
line ending means some block had another one). Anything else -- other fields, comments, several
lines, a decoding error, a buffer over 64 KiB -- takes the general path, which reads lines at
byte level (CR, LF, ":" and " " never occur inside a UTF-8 sequence) and decodes each value once:
a small region without CR as one list of lines (``event:``/``id:`` streams), anything else block
by block, a huge value in place.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from operator import methodcaller
from typing import Literal, NamedTuple

from ..errors import DecodingError, EventTooLargeError, LocalProtocolError, StreamError

__all__ = ["DEFAULT_MAX_EVENT_SIZE", "SSEDecoder", "ServerSentEvent"]

DEFAULT_MAX_EVENT_SIZE = 16 * 2**20
_BOM = b"\xef\xbb\xbf"
_CR, _LF = 0x0D, 0x0A
# The first block end at or after a position, in a region that contains a CR.
_BLOCK_END = re.compile(rb"\n[\r\n]|\r\r")
_LINE_BREAK = re.compile("\r\n|\r|\n")
# What follows the first line of a block that has no other: its line end and the blank line.
_LAST_LINE_ENDS = frozenset({b"\n\n", b"\n\r", b"\r\r", b"\r\n\r", b"\r\n\n"})
# Blocks and values up to this size are sliced out and decoded; longer ones are decoded in place.
_COPY_LIMIT = 1 << 16
# Two line-ending bytes that end a block (the second ends an empty line); CR LF is one line end.
_PAIRS = frozenset({(_LF, _LF), (_LF, _CR), (_CR, _CR)})
_COLON = 0x3A
_OPEN, _EOF, _FAILED = "open", "eof", "failed"
# Above this many buffered bytes the copy-careful general path is taken (a huge event's bytes are
# then copied once, not three times).
_SMALL = 65536


def _decode(src: bytes, start: int, stop: int, errors: str) -> str:
    if stop - start < _COPY_LIMIT:
        return src[start:stop].decode("utf-8", errors)
    with memoryview(src) as view:  # a huge value is decoded in place, not copied first
        return str(view[start:stop], "utf-8", errors)


class ServerSentEvent(NamedTuple):
    """One dispatched event. ``raw`` is its block's bytes on the wire (BOM excluded)."""

    event: str = "message"
    data: str = ""
    id: str = ""
    block_id: str | None = None
    retry: int | None = None
    nbytes: int = 0
    raw: bytes = b""


_EVENT = ServerSentEvent
# Builds an event from a ready tuple: the NamedTuple's own ``__new__`` is Python code, 4x slower.
_new_event = tuple.__new__


class SSEDecoder:
    """Incremental SSE decoder: ``receive_data(chunk)`` and ``receive_eof()`` return events.

    ``errors="strict"`` raises ``DecodingError`` (with the stream byte offset) on invalid UTF-8;
    ``errors="replace"`` substitutes U+FFFD as a browser does. A block larger than
    ``max_event_size`` raises ``EventTooLargeError`` once the buffer passes the limit, without
    waiting for the rest of it.
    """

    __slots__ = (
        "_base",
        "_buf",
        "_cr",
        "_decode",
        "_errors",
        "_head",
        "_last_event_id",
        "_max",
        "_plain",
        "_retry",
        "_state",
        "_swallow_lf",
        "_unterminated",
    )

    def __init__(
        self,
        errors: Literal["strict", "replace"] = "strict",
        max_event_size: int = DEFAULT_MAX_EVENT_SIZE,
        last_event_id: str = "",
    ) -> None:
        if errors not in ("strict", "replace"):
            raise ValueError(f"errors must be 'strict' or 'replace', not {errors!r}")
        if max_event_size < 1:
            raise ValueError("max_event_size must be positive")
        self._errors = errors
        self._decode: Callable[[bytes], str] = (
            bytes.decode if errors == "strict" else methodcaller("decode", "utf-8", "replace")
        )
        self._max = max_event_size
        self._last_event_id = last_event_id
        self._retry: int | None = None
        self._buf = bytearray()  # from the start of the current (incomplete) block
        self._base = 0  # stream offset of self._buf[0]
        self._head: bytes | None = b""  # first bytes while a BOM may still be arriving
        self._swallow_lf = False  # the last block ended on a CR: an LF at self._buf[0] is its pair
        self._cr = False  # a CR was seen: search all three kinds of block end, not just LF LF
        self._state = _OPEN
        self._plain = False  # open and past the BOM: a read without a line end is just appended
        self._unterminated = b""

    # -- stream-level state -------------------------------------------------------------------

    @property
    def last_event_id(self) -> str:
        """The last event ID string, as it stood at the last dispatch."""
        return self._last_event_id

    @property
    def reconnection_time(self) -> int | None:
        """The last valid ``retry`` value in milliseconds, or None if none was given."""
        return self._retry

    @property
    def unterminated(self) -> bytes:
        """Bytes of an incomplete event discarded at EOF (evidence of a cut stream)."""
        return self._unterminated

    @property
    def bytes_received(self) -> int:
        """Every byte passed to ``receive_data`` so far, BOM included."""
        return self._base + len(self._buf) + len(self._head or b"")

    # -- input ----------------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> list[ServerSentEvent]:
        # Membership tests take the byte as an int: with a bytes operand CPython first tries it as
        # an int, fails, and clears the error (5x slower).
        if self._plain:  # open, and past the BOM
            buf = self._buf
            if _LF not in data and _CR not in data:
                # No line ends in this read, so no block can.
                buf += data
                if len(buf) > self._max:
                    self._end(_FAILED)
                    raise self._too_large(self._base)
                return []
            if len(data) == 1 and len(buf) > 1 and (buf[-1], data[0]) not in _PAIRS:
                # One line-ending byte that ends a line that is not empty (it makes no pair
                # with the last byte, and the block has begun): no block can end either.
                if data[0] == _CR:
                    self._cr = True
                buf += data
                if len(buf) > self._max:
                    self._end(_FAILED)
                    raise self._too_large(self._base)
                return []
            if data.__class__ is not bytes:
                data = bytes(data)  # the searches below need real bytes, not a memoryview
        else:
            if self._state is not _OPEN:
                raise LocalProtocolError(f"receive_data() after the decoder {self._state}")
            rest = self._take_head(bytes(data))
            if rest is None:
                return []  # the body so far is the start of a BOM
            self._plain = True
            return self.receive_data(rest)
        cr = self._cr
        if not cr and _CR in data:
            cr = self._cr = True
        buf = self._buf
        # The hot path: every block that ends in this read is one "data: " line, LF LF or
        # CR LF CR (LF) terminated. The blocks are split apart on the separator between two such
        # lines; a value that still holds a line ending means some block had another shape, and
        # that (or a decoding error) sends the read down the general path instead. It first
        # looks in the new bytes for the last block's end pair, so that the buffer is only
        # copied when a block is complete.
        pair = b"\n\r" if cr else b"\n\n"
        end = data.rfind(pair)
        if end < 0:
            if not (buf and buf[-1] == _LF and data[0] == pair[1]) or len(buf) > _SMALL:
                return self._receive(data)
        elif len(buf) > _SMALL:
            return self._receive(data)
        if buf:
            end += len(buf)
            joined = b"".join((buf, data))
        else:
            joined = data
        if cr:
            if end < 1 or joined[end - 1] != _CR:
                return self._receive(data)
            # A later block end of another kind (LF LF, CR CR) would be in the unfinished tail;
            # a tail with no line ending but the LF of the last CR LF CR cannot hold one.
            rest = joined[end + 3 :] if joined[end + 2 : end + 3] == b"\n" else joined[end + 2 :]
            if _LF in rest or _CR in rest:
                return self._receive(data)
            lead = 1 if self._swallow_lf and joined[0] == _LF else 0
            value_end = end - 1
            sep = b"\r\n\r\ndata: "
            size = 9 + lead  # the first block: [LF] "data: " value CR LF CR
        else:
            lead = 0
            value_end = end
            sep = b"\n\ndata: "
            size = 8  # "data: " value LF LF
        if not joined.startswith(b"data: ", lead) or end + 2 > self._max:
            return self._receive(data)
        last_id = self._last_event_id
        new, cls, decode = _new_event, _EVENT, self._decode
        events: list[ServerSentEvent] = []
        append = events.append
        start = 0
        later = len(sep)  # a later block: [LF] "data: " value LF [CR], as long as a separator
        complete = False
        try:
            for value in joined[lead + 6 : value_end].split(sep):
                if _LF in value or (cr and _CR in value):
                    break
                stop = start + size + len(value)
                append(new(cls, ("message", decode(value), last_id, None, None, stop - start,
                                 joined[start:stop])))  # fmt: skip
                start = stop
                size = later
            else:
                complete = True
        except UnicodeDecodeError:
            pass
        if not complete:
            return self._receive(data)  # the general path decodes it (and finds any error)
        self._buf = tail = bytearray(joined[start:])
        self._base += start
        self._swallow_lf = cr
        if len(tail) > self._max:
            self._end(_FAILED)
            raise self._too_large(self._base, events)
        return events

    def receive_eof(self) -> list[ServerSentEvent]:
        if self._state is not _OPEN:
            raise LocalProtocolError(f"receive_eof() after the decoder {self._state}")
        self._end(_EOF)
        if self._head:
            self._unterminated = self._head  # the body was only part of a BOM
            self._head = None
            return []
        tail = bytes(self._buf)
        if self._swallow_lf and tail[:1] == b"\n":
            tail = tail[1:]
        # Complete lines of the discarded tail still set the reconnection time, as line-by-line
        # processing would; nothing is dispatched.
        self._unterminated = tail
        cut = max(tail.rfind(b"\n"), tail.rfind(b"\r"))
        if cut >= 0:
            text = tail[:cut].decode("utf-8", "replace")
            for line in _LINE_BREAK.split(text):
                value = line[6:].removeprefix(" ")
                if line.startswith("retry:") and value.isascii() and value.isdigit():
                    self._retry = int(value)
        return []

    # -- internals ------------------------------------------------------------------------------

    def _end(self, state: str) -> None:
        self._state = state
        self._plain = False

    def _take_head(self, data: bytes) -> bytes | None:
        """Strip one leading BOM, even when its three bytes arrive in separate reads.

        None while the body so far could still be the start of a BOM.
        """
        assert self._head is not None
        data = self._head + data
        if len(data) < 3 and _BOM.startswith(data):
            self._head = data
            return None
        self._head = None
        if data.startswith(_BOM):
            self._base = 3
            return data[3:]
        return data

    def _too_large(
        self, offset: int, events: list[ServerSentEvent] | None = None
    ) -> EventTooLargeError:
        return EventTooLargeError(
            f"event larger than max_event_size={self._max} bytes",
            limit=self._max,
            offset=offset,
            events=events,
        )

    def _receive(self, data: bytes) -> list[ServerSentEvent]:
        """The general path: append a read, then cut and decode the complete blocks."""
        events: list[ServerSentEvent] = []
        try:
            self._cut(data, events)
        except StreamError as err:
            self._end(_FAILED)
            err.events = events
            raise
        return events

    def _cut(self, data: bytes, events: list[ServerSentEvent]) -> None:
        buf = self._buf
        searched = len(buf)
        # Only the read, and the pair its first byte may make with the last buffered one, can
        # hold a new block end. The read itself is searched: no call ever runs over the buffer.
        end = data.rfind(b"\n\n")
        if self._cr:
            end = max(end, data.rfind(b"\n\r"), data.rfind(b"\r\r"))
        if end >= 0:
            end += searched + 2
        elif searched and data and (buf[-1], data[0]) in _PAIRS:
            end = searched + 1
        buf += data
        if end < 0:
            # No pair; but a line ending at the start of a block is a blank line by itself.
            first = 1 if self._swallow_lf and buf[0] == _LF else 0
            if len(buf) > first and buf[first] in (_CR, _LF):
                end = first + 1
            else:
                if len(buf) > self._max:
                    raise self._too_large(self._base)
                return
        if end == len(buf):
            region = bytes(buf)
            buf.clear()
        else:
            with memoryview(buf) as view:
                region = view[:end].tobytes()
            del buf[:end]
        base = self._base
        swallow_lf = self._swallow_lf
        self._base = base + end
        self._swallow_lf = region[-1] == _CR
        if end > self._max or not self._data_lines(region, swallow_lf, events):
            self._blocks(region, base, swallow_lf, events)
        if len(buf) > self._max:
            raise self._too_large(self._base)

    def _data_lines(self, region: bytes, swallow_lf: bool, events: list[ServerSentEvent]) -> bool:
        """Decode a region whose every block is one ``data: `` line at once; False if it is not.

        The shape is proved by counting, not by looping: k blocks hold exactly 2k line-ending
        bytes of their own (LF LF, or CR LF CR plus the next block's leading LF), so when the
        region holds no more than that, no value contains a line ending.
        """
        lead = 1 if swallow_lf and region[0] == _LF else 0  # the LF of the last block's CRLF
        if not region.startswith(b"data: ", lead):
            return False
        size = len(region)
        if _CR in region:  # CRLF: "data: v\r\n\r", then "\ndata: v\r\n\r", ...
            end, sep, own_lf = b"\r\n\r", "\r\n\r\ndata: ", -1
        else:
            end, sep, own_lf = b"\n\n", "\n\ndata: ", 0
        value_end = size - len(end)
        if region.find(end, lead) == value_end:  # one block: decode in place, no copies
            if region.count(b"\n") != 2 + own_lf + lead or (own_lf and region.count(b"\r") != 2):
                return False
            with memoryview(region) as view:
                try:
                    data = str(view[lead + 6 : value_end], "utf-8", self._errors)
                except UnicodeDecodeError:
                    return False  # the block-by-block path reports the exact offset
            events.append(
                ServerSentEvent("message", data, self._last_event_id, None, None, size, region)
            )
            return True
        blocks = region.split(end)
        if blocks.pop():
            return False  # the region does not end with this kind of block end
        count = len(blocks)
        if region.count(b"\n") != 2 * count + own_lf + lead or (
            own_lf and region.count(b"\r") != 2 * count
        ):
            return False
        try:
            text = region.decode("utf-8", self._errors)
        except UnicodeDecodeError:
            return False
        datas = text[lead + 6 : -len(end)].split(sep)
        if len(datas) != count:
            return False  # some block does not start with "data: "
        last_id = self._last_event_id
        append = events.append
        for data, block in zip(datas, blocks, strict=True):
            raw = block + end
            append(_new_event(_EVENT, ("message", data, last_id, None, None, len(raw), raw)))
        return True

    def _blocks(
        self, region: bytes, base: int, swallow_lf: bool, events: list[ServerSentEvent]
    ) -> None:
        """Decode a region of complete blocks one block at a time (any shape)."""
        size = len(region)
        lf_only = _CR not in region
        if lf_only and size <= _COPY_LIMIT and size <= self._max and region[0] != _LF:
            self._lf_lines(region, base, events)  # no block can be huge or over the limit
            return
        start = 0
        while start < size:
            text = start + 1 if swallow_lf and region[start] == _LF else start
            if region[text] in (_CR, _LF):
                end = text + 1  # a blank line at the start of a block: nothing to interpret
            else:
                if lf_only:
                    end = region.find(b"\n\n", text) + 2
                else:
                    match = _BLOCK_END.search(region, text)
                    assert match is not None  # the region ends at a block end
                    end = match.end()
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
                        _new_event(
                            _EVENT,
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
        return _new_event(
            _EVENT,
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
        return _new_event(
            _EVENT,
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
