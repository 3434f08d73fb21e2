"""Server-sent events, decoded per WHATWG HTML "Interpreting an event stream".

Bytes are cut into blocks (everything up to and including a blank line) at byte level, and each
complete block is decoded once: CR and LF never occur inside a multi-byte UTF-8 sequence, so no
character can straddle a block boundary and no carry is needed.

Line endings are CRLF, LF or a lone CR. A CR that ends one read ends its line at once; if the next
read starts with LF, that LF is the second half of a CRLF and is swallowed. ``nbytes`` and ``raw``
cover a block with its terminator, by a rule on the bytes alone (so every chunking agrees): a block
that ends in LF CR (as in every CRLF stream) also takes the LF after that CR, if one follows, so
the blocks of a CRLF or LF body add up to it. A read that ends at such a CR *holds* the block until
the next read's first byte shows whether an LF follows; EOF dispatches it as it is. That LF counts
toward ``max_event_size`` like any byte of its block. A block that ends in CR CR (CR-only line
ends), or a blank line that starts a block, is dispatched at its CR at once; an LF after it is
swallowed as the next block's first byte.

Where blocks end: every CR or LF ends a line, except that CR LF together end one line. So two
line-ending bytes in a row other than CR LF -- ``\\n\\n``, ``\\n\\r`` or ``\\r\\r`` -- mean the
second one ends an empty line, and a block ends right after it; so does a line ending at the very
start of a block. Only a read (and the pair its first byte makes with the last buffered byte) can
hold a new block end, so each read is searched once, backwards, for the last pair: everything
before it is complete blocks, decoded at once; the rest waits in the buffer. A read without a line
ending is only appended. The buffer is never searched again, and copied only when a block in it
is complete, so the work is linear for any chunking.

Two paths decode complete blocks. The hot path takes a read whose complete blocks are all single
``data: `` lines (LF LF or CR LF CR LF terminated: OpenAI-style deltas), or ``event: NAME`` +
``data: VALUE`` lines (Anthropic Messages, OpenAI Responses), mixed freely with the first kind: it
splits them on the separators between such lines and proves the shape as it goes (a name or
value holding a line ending means some block had another one). Anything else -- other fields,
comments, several data lines, an empty event name, a decoding error, a buffer over 64 KiB --
takes the general path (``BlockReader`` in ``sse_blocks``; the named-event blocks are read by
``NamedBlocks`` in ``sse_named``), which reads lines at byte level and
decodes each value once. The hot path changes no state until the whole read has been read, so
when it gives up, the general path reads the same bytes from the same state.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from operator import methodcaller
from typing import Literal

from ..errors import LocalProtocolError, StreamError
from .sse_blocks import ServerSentEvent, new_event
from .sse_named import EVENT_SEP, NamedBlocks

__all__ = ["DEFAULT_MAX_EVENT_SIZE", "SSEDecoder", "ServerSentEvent"]

DEFAULT_MAX_EVENT_SIZE = 16 * 2**20
_BOM = b"\xef\xbb\xbf"
_CR, _LF = 0x0D, 0x0A
_LINE_BREAK = re.compile("\r\n|\r|\n")
# Two line-ending bytes that end a block (the second ends an empty line); CR LF is one line end.
_PAIRS = frozenset({(_LF, _LF), (_LF, _CR), (_CR, _CR)})
_LINE_ENDS = (b"\r", b"\n")
_OPEN, _EOF, _FAILED = "open", "eof", "failed"
# Above this many buffered bytes the copy-careful general path is taken (a huge event's bytes are
# then copied once, not three times).
_SMALL = 65536
# Blocks of one "data: " line are tried first. Tests turn this off to send every read down the
# named-event path (which reads those blocks too), and set _SMALL to -1 for the general path.
_DATA_LINES_FIRST = True


class SSEDecoder(NamedBlocks):
    """Incremental SSE decoder: ``receive_data(chunk)`` and ``receive_eof()`` return events.

    ``errors="strict"`` raises ``DecodingError`` (with the stream byte offset) on invalid UTF-8;
    ``errors="replace"`` substitutes U+FFFD as a browser does. A block larger than
    ``max_event_size`` raises ``EventTooLargeError`` once the buffer passes the limit, without
    waiting for the rest of it.
    """

    __slots__ = (
        "_base",
        "_buf",
        "_decode",
        "_head",
        "_held",
        "_plain",
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
        self._held = False  # self._buf is a block that ends in LF CR, waiting for the next byte
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

    @property
    def bytes_dispatched(self) -> int:
        """Bytes before the first one not yet in a returned event or a skipped block (BOM
        included): where the next block starts."""
        return self._base

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
            if not self._held:
                rest = self._take_head(bytes(data))
                if rest is None:
                    return []  # the body so far is the start of a BOM
                self._plain = True
                return self.receive_data(rest)
            # The buffer is a block held at its CR: this read's first byte decides its end.
            if not data:
                return []
            data = bytes(data)
            self._plain = True
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
            if len(buf) > _SMALL:
                return self._receive(data)
            if buf and buf[-1] == _LF and data[0] == pair[1]:
                if len(data) == 1 and cr:
                    # The read ends at the CR of LF CR: hold the block (the next byte decides).
                    buf += data
                    self._held = True
                    self._plain = False
                    if len(buf) > self._max:
                        self._end(_FAILED)
                        raise self._too_large(self._base)
                    return []
            elif self._held:
                end = -2  # the held block's LF CR ends the buffer
            else:
                return self._receive(data)
        elif len(buf) > _SMALL:
            return self._receive(data)
        if buf:
            end += len(buf)
            joined = b"".join((buf, data))
        else:
            joined = data
        after = end + 2  # past the last block end
        if cr:
            if end < 1 or joined[end - 1] != _CR:
                return self._receive(data)
            if joined[after : after + 1] == b"\n":
                after += 1  # the last block takes the LF after its CR
            # A later block end of another kind (LF LF, CR CR) would be in the unfinished tail,
            # or a line ending at its start (past the LF of the last CR LF CR).
            rest = joined[after:]
            if (_LF in rest or _CR in rest) and (
                rest[:1] in _LINE_ENDS or b"\n\n" in rest or b"\r\r" in rest
            ):
                return self._receive(data)
            lead = 1 if self._swallow_lf and joined[0] == _LF else 0
            value_end = end - 1
            sep = b"\r\n\r\ndata: "
            size = 10 + lead  # the first block: [LF] "data: " value CR LF CR LF
        else:
            lead = 0
            value_end = end
            sep = b"\n\ndata: "
            size = 8  # "data: " value LF LF
        if after > self._max:
            return self._receive(data)
        events: list[ServerSentEvent] = []
        start = 0
        try:
            if _DATA_LINES_FIRST and joined.startswith(b"data: ", lead):
                last_id = self._last_event_id
                new, cls, decode = new_event, ServerSentEvent, self._decode
                append = events.append
                later = len(sep)  # a later block: "data: " value, then LF LF or CR LF CR LF
                for value in joined[lead + 6 : value_end].split(sep):
                    if _LF in value or (cr and _CR in value):
                        # This block, or one after it, has another shape. If an "event:"
                        # block follows it, the named-event path takes over from here.
                        if EVENT_SEP[cr] in value:
                            lead = lead if start == 0 else 0
                            start = self._event_blocks(joined, start, lead, value_end, cr, events)
                        else:
                            start = -1
                        break
                    stop = start + size + len(value)
                    append(new(cls, ("message", decode(value), last_id, None, None,
                                     stop - start, joined[start:stop])))  # fmt: skip
                    start = stop
                    size = later
            else:
                start = self._event_blocks(joined, 0, lead, value_end, cr, events)
        except UnicodeDecodeError:
            start = -1
        if start < 0:
            return self._receive(data)  # the general path decodes it (and finds any error)
        held = False
        if start > after:
            # Every block was counted with the LF after its CR LF CR; the last one has none.
            last = events.pop()
            if after == len(joined):
                held = True  # the read ends at its CR: the next byte decides
                start -= last[5]
            else:
                start = after
                events.append(new_event(ServerSentEvent, (*last[:5], last[5] - 1,
                                                          last[6][:-1])))  # fmt: skip
        self._buf = tail = bytearray(joined[start:])
        self._base += start
        if start:
            self._swallow_lf = joined[start - 1] == _CR
        self._held = held
        if held:
            self._plain = False
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
        # A block held at its CR is complete: no LF follows it (an empty read is EOF to _cut).
        events = self._receive(b"") if self._held else []
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
        return events

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
        elif self._held:
            end = searched  # the held block: this read's first byte says if it takes an LF
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
        # An LF after the last block's CR goes with the region: that block takes it if it ends
        # in LF CR; if not, it is given back as the next block's swallowed LF.
        if end < len(buf) and buf[end] == _LF and buf[end - 1] == _CR:
            end += 1
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
        self._held = False
        # Hold a last block that ends in LF CR if nothing after it has arrived yet (and this is
        # not EOF, the only empty read that comes here).
        took = self._blocks(region, base, swallow_lf, events, not buf and data != b"")
        if took < end:
            # A held block, or an LF for the next block to swallow: back to the buffer.
            buf[:0] = region[took:]
            self._base = base + took
            self._swallow_lf = region[took - 1] == _CR if took else swallow_lf
            if region[-1] == _CR:
                self._held = True
                self._plain = False
        if len(buf) > self._max:
            raise self._too_large(self._base)
