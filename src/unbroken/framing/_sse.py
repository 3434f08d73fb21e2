"""Server-sent events, decoded per WHATWG HTML "Interpreting an event stream".

``SSEDecoder`` cuts blocks and hands the complete ones to the optional accelerator
(``_sse_fast``), else one by one to the field reader (``_sse_fields``). A line end right after
another (LF LF, LF CR, CR CR; CR LF is one line end) ends a block; before a block, the byte before
is the line end that ended the last one. Only a new read, and the pair its first byte makes, can
hold a block end: each read is searched once, the buffer never. CR and LF never occur inside a
UTF-8 sequence, so blocks are cut as bytes and each is decoded once.

``raw``/``nbytes`` follow the bytes alone, so every chunking agrees: a block that ends in LF CR
(CRLF streams) takes the LF after that CR, so a read that ends at that CR holds the block until
the next byte (or EOF); after a block that ends in CR CR, or a blank line, the next block
swallows an LF.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from operator import methodcaller
from typing import ClassVar, Literal

from ..errors import DecodingError, EventTooLargeError, LocalProtocolError, StreamError
from ._sse_fast import read_shaped
from ._sse_fields import COPY_LIMIT, FieldReader, ServerSentEvent

__all__ = ["DEFAULT_MAX_EVENT_SIZE", "SSEDecoder", "ServerSentEvent"]

DEFAULT_MAX_EVENT_SIZE = 16 * 2**20
_BOM = b"\xef\xbb\xbf"
_CR, _LF = 0x0D, 0x0A
# Two line-ending bytes whose second ends an empty line (CR LF is one line end).
_PAIRS = frozenset({(_LF, _LF), (_LF, _CR), (_CR, _CR)})
_BLOCK_END = re.compile(rb"\n[\r\n]|\r\r")  # the first pair at or after a position
# Open while a BOM may be arriving, with a block held, or neither (plain); then finished.
_START, _HELD, _PLAIN, _EOF, _FAILED = "start", "held", "plain", "eof", "failed"

# (joined, end, lead, cr, last_id, decode) -> events, or None: not its shape
Accelerator = Callable[..., list[ServerSentEvent] | None]


class SSEDecoder:
    """Incremental SSE decoder: ``receive_data(chunk)`` and ``receive_eof()`` return events.

    On invalid UTF-8 ``errors="strict"`` raises ``DecodingError`` (with the stream offset),
    ``"replace"`` puts U+FFFD as a browser does. A block larger than ``max_event_size`` raises
    ``EventTooLargeError`` as soon as the buffer passes the limit."""

    # The composed parts, which a subclass may change (tests run every route so): the
    # accelerator, or None; and the size above which a block is read in place.
    accelerator: ClassVar[Accelerator | None] = staticmethod(read_shaped)
    copy_limit: ClassVar[int] = COPY_LIMIT

    __slots__ = ("_base", "_buf", "_cr", "_decode", "_fast", "_fields", "_head", "_max", "_state",
                 "_swallow_lf", "_unterminated")  # fmt: skip

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
        self._decode: Callable[[bytes], str] = (
            bytes.decode if errors == "strict" else methodcaller("decode", "utf-8", "replace")
        )
        self._max = max_event_size
        self._buf = bytearray()  # from the start of the block in progress
        self._base = 0  # stream offset of self._buf[0]
        self._head = b""  # the first bytes while a BOM may still be arriving
        self._swallow_lf = False  # the last block ended on a CR: an LF at self._buf[0] is its pair
        self._cr = False  # a CR was seen: look for every kind of block end, not just LF LF
        self._state = _START
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
        return self._base + len(self._buf) + len(self._head)

    @property
    def bytes_dispatched(self) -> int:
        """Where the next block starts: bytes in returned events or skipped blocks, BOM too."""
        return self._base

    def receive_data(self, data: bytes) -> list[ServerSentEvent]:
        buf = self._buf
        if self._state is not _PLAIN:
            if self._state is _START:  # strip one BOM, even split across reads
                data = self._head + bytes(data)
                if len(data) < 3 and _BOM.startswith(data):
                    self._head = data
                    return []
                self._head, self._state, self._base = b"", _PLAIN, 3 if data.startswith(_BOM) else 0
                data = data[self._base :]
            elif self._state is not _HELD:
                raise LocalProtocolError(f"receive_data() after the decoder {self._state}")
            if not data:
                return []
        # No block end: a read inside a line, or a line-end byte that makes no pair (1-byte reads;
        # a first CR goes on, to set _cr). (Tested as an int: with bytes, CPython tries int first.)
        elif (_LF not in data and _CR not in data) or (
            len(data) == 1 and buf and (buf[-1], data[0]) not in _PAIRS
            and (self._cr or data[0] == _LF)
        ):  # fmt: skip
            buf += data
            if len(buf) > self._max:
                raise self._too_large(self._base)
            return []
        if data.__class__ is not bytes:
            data = bytes(data)  # the searches below need real bytes
        n = len(buf)
        # The last block end: the read's last pair, or the pair of the read's first byte and the
        # byte before. In a CRLF stream, the last CR LF CR LF with no line end after it.
        if not self._cr and _CR not in data:
            end = data.rfind(b"\n\n")
        else:
            self._cr = True
            end = data.rfind(b"\r\n\r\n") + 2  # (as if its LF CR were found, with its LF)
            rest = data[end + 2 :]
            if end < 2 or _CR in rest or _LF in rest:  # none, or a line end after: every kind
                at = data.rfind(b"\n\r")
                end = max(at, data.rfind(b"\n\n", at + 1), data.rfind(b"\r\r", at + 1))
        if end >= 0:
            end += n + 2
        elif (buf[-1] if n else _CR if self._swallow_lf else _LF, data[0]) in _PAIRS:
            end = n + 1
        elif self._state is _HELD:
            end = n  # the held block ends the buffer
        if end < 0 or (data == b"\r" and n and buf[-1] == _LF):
            # No block end; or this read is the CR of an LF CR: its block waits for the next byte.
            buf += data
            self._state = _PLAIN if end < 0 else _HELD
            if len(buf) > self._max:
                raise self._too_large(self._base)
            return []
        joined = b"".join((buf, data)) if n else data
        if joined[end - 1] == _CR and end < len(joined) and joined[end] == _LF:
            end += 1  # a block that ends in LF CR takes it; else the next block swallows it
        self._buf = buf = bytearray(joined[end:])  # (a huge block's buffer is freed now)
        events = None
        if self._fast is not None and n <= self.copy_limit and end <= self._max:
            lead = self._swallow_lf and joined[0] == _LF  # (a bool is an int)
            last_id = self._fields.last_event_id
            events = self._fast(joined, end, lead, self._cr, last_id, self._decode)
        if events is not None:
            self._fields.last_event_id = events[-1][2]  # (the last event carries it)
            used = end
        else:
            events = []
            used = self._blocks(joined, end, end == len(joined), events)
            buf[:0] = joined[used:end]  # a held block, or an LF for the next block to swallow
        self._state = _HELD if used < end and joined[end - 1] == _CR else _PLAIN
        if used:
            self._base += used
            self._swallow_lf = joined[used - 1] == _CR
        if len(buf) > self._max:
            raise self._too_large(self._base, events)
        return events

    def receive_eof(self) -> list[ServerSentEvent]:
        if self._state is _EOF or self._state is _FAILED:
            raise LocalProtocolError(f"receive_eof() after the decoder {self._state}")
        held, self._state = self._state is _HELD, _EOF
        events: list[ServerSentEvent] = []
        tail = self._head + self._buf  # (a body that was only part of a BOM: the head)
        if held:  # complete: no LF follows it
            tail = tail[self._blocks(tail, len(tail), False, events) :]
        elif self._swallow_lf and tail[:1] == b"\n":
            tail = tail[1:]
        self._unterminated = tail
        # The discarded block's complete lines still set the reconnection time (the spec reads
        # line by line); nothing is dispatched.
        cut = max(tail.rfind(b"\n"), tail.rfind(b"\r"))
        self._fields.read(tail, 0, 0, cut + 1, dispatch=False)
        return events

    def _blocks(self, region: bytes, size: int, at_end: bool, events: list[ServerSentEvent]) -> int:
        """Read the blocks of ``region[:size]`` with the field reader; return where the blocks
        read end: ``size``, or the start of a held last block or of an LF to swallow."""
        swallow_lf = self._swallow_lf
        start = 0
        while start < size:
            text = start + 1 if swallow_lf and region[start] == _LF else start
            if text == size:
                break  # only the LF after the last block's CR: the next block swallows it
            if region[text] in (_CR, _LF):
                end = text + 1  # a blank line at the start of a block
            elif self._cr:
                match = _BLOCK_END.search(region, text)
                assert match is not None  # the region ends at a block end
                end = match.end()
            else:  # (a search for one pair is 20x faster than the pattern)
                end = region.find(b"\n\n", text) + 2
            if end - start >= 2 and region[end - 2] == _LF and region[end - 1] == _CR:
                if end < size:
                    end += region[end] == _LF  # (it ends in LF CR: an LF after it is its own)
                elif at_end:
                    break  # the next byte decides
            if end - start > self._max:
                raise self._too_large(self._base + start, events)
            try:
                event = self._fields.read(region, start, text, end)
            except UnicodeDecodeError:
                self._state = _FAILED
                try:  # the block again, for its first invalid byte
                    str(memoryview(region)[text:end], "utf-8")
                except UnicodeDecodeError as exc:
                    at = self._base + text + exc.start
                    message = f"invalid UTF-8 at stream byte offset {at}: {exc.reason}"
                    raise DecodingError(message, offset=at, events=events) from None
                raise  # pragma: no cover  (the block decodes: the field reader's own error)
            if event is not None:
                events.append(event)
            swallow_lf = region[end - 1] == _CR
            start = end
        return start

    def _too_large(self, at: int, events: list[ServerSentEvent] | None = None) -> StreamError:
        self._state = _FAILED  # finished: any further call is the caller's bug
        message = f"event larger than max_event_size={self._max} bytes"
        return EventTooLargeError(message, limit=self._max, offset=at, events=events)
