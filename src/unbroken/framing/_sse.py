"""Server-sent events, decoded per WHATWG HTML "Interpreting an event stream".

``SSEDecoder`` is the block cutter: it buffers the block in progress, finds where blocks end and
hands the complete ones to the optional accelerator (``sse_fast``) or, one by one, to the field
reader (``sse_fields``). CR and LF never occur inside a UTF-8 sequence, so blocks are cut at byte
level and each is decoded once. Two line-end bytes in a row other than CR LF (LF LF, LF CR,
CR CR) mean the second ends an empty line, which ends a block; so does a line end at the start of
a block. Only a new read (and the pair its first byte makes with the last buffered one) can hold
a new block end, so each read is searched once and the buffer never: linear for any chunking.

A CR that ends a read ends its line at once; an LF at the start of the next read is swallowed.
``raw``/``nbytes`` follow a rule on the bytes alone, so every chunking agrees: a block whose bytes
end in LF CR (as in CRLF streams) takes the LF after that CR, so a body's blocks add up to it; a
read that ends at that CR holds the block until the next byte (EOF dispatches it as it is).
After a block ending in CR CR, or a blank line starting a block, the next block swallows an LF.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from operator import methodcaller
from typing import ClassVar, Literal

from ..errors import EventTooLargeError, LocalProtocolError, StreamError
from ._sse_fast import read_shaped
from ._sse_fields import COPY_LIMIT, FieldReader, ServerSentEvent, decoding_error

__all__ = ["DEFAULT_MAX_EVENT_SIZE", "SSEDecoder", "ServerSentEvent"]

DEFAULT_MAX_EVENT_SIZE = 16 * 2**20
_BOM = b"\xef\xbb\xbf"
_CR, _LF = 0x0D, 0x0A
# Two line-ending bytes whose second ends an empty line (CR LF is one line end).
_PAIRS = frozenset({(_LF, _LF), (_LF, _CR), (_CR, _CR)})
_BLOCK_END = re.compile(rb"\n[\r\n]|\r\r")  # the first pair at or after a position
_OPEN, _EOF, _FAILED = "open", "eof", "failed"

# read_shaped's signature: (joined, end, lead, cr, last_id, decode) -> (events, used) | None
Accelerator = Callable[[bytes, int, int, bool, str, Callable[[bytes], str]], "Shaped"]
Shaped = tuple[list[ServerSentEvent], int] | None


class SSEDecoder:
    """Incremental SSE decoder: ``receive_data(chunk)`` and ``receive_eof()`` return events.

    ``errors="strict"`` raises ``DecodingError`` (with the stream byte offset) on invalid UTF-8;
    ``errors="replace"`` substitutes U+FFFD as a browser does. A block larger than
    ``max_event_size`` raises ``EventTooLargeError`` once the buffer passes the limit, without
    waiting for the rest of it.
    """

    # The composed parts (a subclass may change them; tests run every route this way): the
    # accelerator, or None; and the size above which a block is read in place.
    accelerator: ClassVar[Accelerator | None] = staticmethod(read_shaped)
    copy_limit: ClassVar[int] = COPY_LIMIT

    # fmt: off
    __slots__ = ("_base", "_buf", "_copy_limit", "_cr", "_decode", "_fast", "_fields", "_head",
                 "_held", "_max", "_plain", "_state", "_swallow_lf", "_unterminated")
    # fmt: on

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
        self._fields = FieldReader(errors, last_event_id, self.copy_limit)
        self._fast = type(self).accelerator
        self._copy_limit = self.copy_limit
        self._decode: Callable[[bytes], str] = (
            bytes.decode if errors == "strict" else methodcaller("decode", "utf-8", "replace")
        )
        self._max = max_event_size
        self._buf = bytearray()  # from the start of the block in progress
        self._base = 0  # stream offset of self._buf[0]
        self._head: bytes | None = b""  # first bytes while a BOM may still be arriving
        self._swallow_lf = False  # the last block ended on a CR: an LF at self._buf[0] is its pair
        self._held = False  # self._buf is a block that ends in LF CR, waiting for the next byte
        self._cr = False  # a CR was seen: look for every kind of block end, not just LF LF
        self._state = _OPEN
        self._plain = False  # open, past the BOM, nothing held: a read is just cut
        self._unterminated = b""

    @property
    def last_event_id(self) -> str:
        """The last event ID string, as it stood at the last dispatch."""
        return self._fields.last_event_id

    @property
    def reconnection_time(self) -> int | None:
        """The last valid ``retry`` value in milliseconds, or None if none was given."""
        return self._fields.retry

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
        """Where the next block starts: bytes in returned events or skipped blocks, BOM too."""
        return self._base

    def receive_data(self, data: bytes) -> list[ServerSentEvent]:
        buf = self._buf
        if not self._plain:  # not open, a BOM may be arriving, or a block is held
            if self._state is not _OPEN:
                raise LocalProtocolError(f"receive_data() after the decoder {self._state}")
            if self._held:
                if not data:
                    return []
            else:
                rest = self._take_head(bytes(data))
                if rest is None:
                    return []  # the body so far is the start of a BOM
                self._plain = True
                if not rest:
                    return []
                data = rest
        # Membership tests take the byte as an int: with a bytes operand CPython first tries it
        # as an int, fails, and clears the error (5x slower).
        elif _LF not in data and _CR not in data:
            buf += data  # no line ends in this read, so no block can
            if len(buf) > self._max:
                raise self._fail(self._too_large(self._base))
            return []
        elif len(data) == 1 and buf:
            pair = (buf[-1], data[0])
            if pair not in _PAIRS or pair == (_LF, _CR):
                # One byte that ends no block; or the CR of LF CR, which ends one that waits
                # for the next byte (is an LF its own?).
                buf += data
                if data[0] == _CR:
                    self._cr = True
                    if pair == (_LF, _CR):
                        self._held = True
                        self._plain = False
                if len(buf) > self._max:
                    raise self._fail(self._too_large(self._base))
                return []
        if data.__class__ is not bytes:
            data = bytes(data)  # the searches below need real bytes
        n = len(buf)
        cr = self._cr
        if not cr and _CR in data:
            cr = self._cr = True
        # The last block end in the read: the last pair, found by a search of the read alone.
        if cr:
            at = data.rfind(b"\n\r") + 1  # 0 if none
            end = n + at + 1 if at else -1
            # A later end is a pair of another kind, which needs a line end after this pair's
            # (CR) LF: a byte search rules that out first (a search for a pair is 50x slower).
            rest = data[at + 1 + (data[at + 1 : at + 2] == b"\n") :] if at else data
            if _LF in rest or _CR in rest:
                later = max(data.rfind(b"\n\n", at), data.rfind(b"\r\r", at))
                if later >= 0:
                    end = n + later + 2
        else:
            end = data.rfind(b"\n\n")
            if end >= 0:
                end += n + 2
        if end < 0:
            if n and (buf[-1], data[0]) in _PAIRS:
                end = n + 1
            elif self._held:
                end = n  # the held block ends the buffer
            else:  # a line end at the start of a block is a blank line by itself
                head = bytes(buf[:2]) + data[:2]
                first = 1 if self._swallow_lf and head[:1] == b"\n" else 0
                if head[first : first + 1] in (b"\r", b"\n"):
                    end = first + 1
        if end < 0:
            buf += data
            if len(buf) > self._max:
                raise self._fail(self._too_large(self._base))
            return []
        joined = b"".join((buf, data)) if n else data
        size = len(joined)
        if end < size and joined[end - 1] == _CR and joined[end] == _LF:
            end += 1  # the block takes it if it ends in LF CR; else the next block swallows it
        buf[:] = joined[end:]  # (frees a huge block's buffer before its value is decoded)
        # joined[:end] is complete blocks: the accelerator's if they are its shapes, else the
        # field reader's.
        fast = self._fast
        shaped = None
        if fast is not None and n <= self._copy_limit and end <= self._max:
            lead = 1 if self._swallow_lf and joined[0] == _LF else 0
            shaped = fast(joined, end, lead, cr, self._fields.last_event_id, self._decode)
        if shaped is not None:
            events, used = shaped
            if events:  # (an ID line sets it; the last event carries it)
                self._fields.last_event_id = events[-1][2]
        else:
            events = []
            used = self._blocks(joined, end, end == size, events)
        if used < end:  # a held block, or an LF for the next block to swallow
            buf[:0] = joined[used:end]
            self._held = joined[end - 1] == _CR
            self._plain = not self._held
        elif not self._plain:
            self._held = False
            self._plain = True
        if used:
            self._base += used
            self._swallow_lf = joined[used - 1] == _CR
        if len(buf) > self._max:
            raise self._fail(self._too_large(self._base, events))
        return events

    def receive_eof(self) -> list[ServerSentEvent]:
        if self._state is not _OPEN:
            raise LocalProtocolError(f"receive_eof() after the decoder {self._state}")
        self._state = _EOF
        self._plain = False
        if self._head:
            self._unterminated = self._head  # the body was only part of a BOM
            self._head = None
            return []
        events: list[ServerSentEvent] = []
        tail = bytes(self._buf)
        if self._held:  # complete: no LF follows it
            tail = tail[self._blocks(tail, len(tail), False, events) :]
        elif self._swallow_lf and tail[:1] == b"\n":
            tail = tail[1:]
        self._unterminated = tail
        # Complete lines of the discarded block still set the reconnection time, as line-by-line
        # processing would; nothing is dispatched.
        cut = max(tail.rfind(b"\n"), tail.rfind(b"\r"))
        if cut >= 0:
            self._fields.read(tail, 0, 0, cut + 1, dispatch=False)
        return events

    def _blocks(
        self, region: bytes, size: int, at_end: bool, events: list[ServerSentEvent]
    ) -> int:
        """Read the complete blocks of ``region[:size]`` one by one with the field reader.

        Returns where the blocks read end: ``size``, or where a held last block (it ends in LF
        CR and nothing after it has arrived) or a last LF for the next block to swallow starts.
        An error carries the events before it, and finishes the decoder.
        """
        swallow_lf = self._swallow_lf
        base = self._base
        start = 0
        while start < size:
            text = start + 1 if swallow_lf and region[start] == _LF else start
            if text == size:
                break  # only the LF after the last block's CR: the next block swallows it
            if region[text] in (_CR, _LF):
                end = text + 1  # a blank line at the start of a block
            else:
                if self._cr:
                    match = _BLOCK_END.search(region, text)
                    assert match is not None  # the region ends at a block end
                    end = match.end()
                else:  # (a search for one pair is 20x faster than the pattern)
                    end = region.find(b"\n\n", text) + 2
            if end - start >= 2 and region[end - 2] == _LF and region[end - 1] == _CR:
                # It ends in LF CR: the LF after that CR, if one follows, is its own.
                if end < size:
                    end += region[end] == _LF
                elif at_end:
                    break  # the next byte decides
            if end - start > self._max:
                raise self._fail(self._too_large(base + start, events))
            try:
                event = self._fields.read(region, start, text, end)
            except UnicodeDecodeError:
                error = decoding_error(region, text, end, base)
                error.events = events
                raise self._fail(error) from None
            if event is not None:
                events.append(event)
            swallow_lf = region[end - 1] == _CR
            start = end
        return start

    def _take_head(self, data: bytes) -> bytes | None:
        """Strip one leading BOM, even split across reads (None while one may be arriving)."""
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

    def _too_large(self, at: int, events: list[ServerSentEvent] | None = None) -> StreamError:
        message = f"event larger than max_event_size={self._max} bytes"
        return EventTooLargeError(message, limit=self._max, offset=at, events=events)

    def _fail(self, err: StreamError) -> StreamError:
        """The decoder is finished: any further call is the caller's bug."""
        self._state = _FAILED
        self._plain = False
        return err
