"""Server-sent events, decoded per WHATWG HTML "Interpreting an event stream".

Bytes are cut into blocks (everything up to and including a blank line) at byte level, and each
complete block is decoded once: CR and LF never occur inside a multi-byte UTF-8 sequence, so no
character can straddle a block boundary and no carry is needed.

Line endings are CRLF, LF or a lone CR. A CR that ends one read ends its line at once; if the next
read starts with LF, that LF is the second half of a CRLF and is swallowed. So that every chunking
gives identical events, the LF of a CRLF that *ends an event* is always counted in the next block's
``nbytes`` (an event dispatched on its CR cannot wait for an LF that may never come).
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

from ..errors import DecodingError, EventTooLargeError, LocalProtocolError, StreamError

__all__ = ["DEFAULT_MAX_EVENT_SIZE", "SSEDecoder", "ServerSentEvent"]

DEFAULT_MAX_EVENT_SIZE = 16 * 2**20
_BOM = b"\xef\xbb\xbf"
# A line terminator followed by the first byte of another one: the end of a block. A CR at the very
# end of the buffer ends its line (the lookahead succeeds at the end), as the spec asks.
_BLOCK_END = re.compile(rb"(?:\r\n|\r(?!\n)|\n)[\r\n]")
_LINE_BREAK = re.compile("\r\n|\r|\n")
_EOL_BYTES = b"\r\n"


class ServerSentEvent(NamedTuple):
    """One dispatched event. ``raw`` is its block's bytes on the wire (BOM excluded)."""

    event: str = "message"
    data: str = ""
    id: str = ""
    block_id: str | None = None
    retry: int | None = None
    nbytes: int = 0
    raw: bytes = b""


class SSEDecoder:
    """Incremental SSE decoder: ``receive_data(chunk)`` and ``receive_eof()`` return events.

    ``errors="strict"`` raises ``DecodingError`` (with the stream byte offset) on invalid UTF-8;
    ``errors="replace"`` substitutes U+FFFD as a browser does. A block larger than
    ``max_event_size`` raises ``EventTooLargeError`` once the buffer passes the limit, without
    waiting for the rest of it.
    """

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
        self._max = max_event_size
        self._last_event_id = last_event_id
        self._retry: int | None = None
        self._buf = bytearray()
        self._base = 0  # stream offset of self._buf[0]
        self._start = 0  # start of the current block in self._buf
        self._scan = 0  # where the next search for a block end resumes
        self._head: bytes | None = b""  # first bytes while a BOM may still be arriving
        self._swallow_lf = False  # the previous block ended on a CR
        self._saw_cr = False  # once a CR is seen, the general (regex) block search is used
        self._state: Literal["open", "eof", "failed"] = "open"
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
        if self._state != "open":
            raise LocalProtocolError(f"receive_data() after the decoder {self._state}")
        if not data:
            return []
        if self._head is not None:
            data = self._take_head(data)
            if not data:
                return []
        if not self._saw_cr and b"\r" in data:
            self._saw_cr = True
        self._buf += data
        return self._guarded()

    def receive_eof(self) -> list[ServerSentEvent]:
        if self._state != "open":
            raise LocalProtocolError(f"receive_eof() after the decoder {self._state}")
        self._state = "eof"
        if self._head:
            self._unterminated = self._head  # the body was only part of a BOM
            self._head = None
            return []
        tail = bytes(self._buf[self._start :])
        if self._swallow_lf and tail[:1] == b"\n":
            tail = tail[1:]
        # Complete lines of the discarded tail still set the reconnection time, as line-by-line
        # processing would; nothing is dispatched.
        body = tail.lstrip(_EOL_BYTES)
        self._unterminated = body
        cut = max(body.rfind(b"\n"), body.rfind(b"\r"))
        if cut >= 0:
            text = body[:cut].decode("utf-8", "replace")
            for line in _LINE_BREAK.split(text):
                if line.startswith("retry:"):
                    self._set_retry(line[6:].removeprefix(" "))
        return []

    # -- internals ------------------------------------------------------------------------------

    def _take_head(self, data: bytes) -> bytes:
        """Strip one leading BOM, even when its three bytes arrive in separate reads."""
        assert self._head is not None
        data = self._head + data
        if len(data) < 3 and _BOM.startswith(data):
            self._head = data
            return b""
        self._head = None
        if data.startswith(_BOM):
            self._base = 3
            return data[3:]
        return data

    def _guarded(self) -> list[ServerSentEvent]:
        events: list[ServerSentEvent] = []
        try:
            self._next_blocks(events)
        except StreamError as err:
            self._state = "failed"
            err.events = events
            raise
        return events

    def _next_blocks(self, events: list[ServerSentEvent]) -> None:
        buf = self._buf
        while True:
            start = self._start
            if self._swallow_lf:
                if start >= len(buf):
                    break
                self._swallow_lf = False
                skip = 1 if buf[start] == 0x0A else 0
            else:
                skip = 0
            end = self._find_block_end(start + skip)
            if end < 0:
                if len(buf) - start > self._max:
                    raise EventTooLargeError(
                        f"event larger than max_event_size={self._max} bytes",
                        limit=self._max,
                        offset=self._base + start,
                    )
                if skip:  # keep the swallowed LF out of the next search
                    self._swallow_lf = True
                break
            if end - start > self._max:
                raise EventTooLargeError(
                    f"event larger than max_event_size={self._max} bytes",
                    limit=self._max,
                    offset=self._base + start,
                )
            self._swallow_lf = buf[end - 1] == 0x0D
            self._start = self._scan = end
            event = self._dispatch_block(start, skip, end)
            if event is not None:
                events.append(event)
        if self._start:
            del buf[: self._start]
            self._base += self._start
            self._scan -= self._start
            self._start = 0

    def _find_block_end(self, text_start: int) -> int:
        """End offset (exclusive) of the first complete block, or -1; never rescans."""
        buf = self._buf
        scan = max(self._scan, text_start)
        # A blank line at the very start of a block: the block is that line alone.
        if scan == text_start and text_start < len(buf) and buf[text_start] in _EOL_BYTES:
            return text_start + 1
        if not self._saw_cr:
            found = buf.find(b"\n\n", scan)
            if found >= 0:
                return found + 2
            self._scan = max(text_start, len(buf) - 1)
            return -1
        match = _BLOCK_END.search(buf, scan)
        if match is not None:
            return match.end()
        self._scan = max(text_start, len(buf) - 2)
        return -1

    def _dispatch_block(self, start: int, skip: int, end: int) -> ServerSentEvent | None:
        raw = bytes(self._buf[start:end])
        try:
            text = raw[skip:].decode("utf-8", self._errors)
        except UnicodeDecodeError as exc:
            offset = self._base + start + skip + exc.start
            raise DecodingError(
                f"invalid UTF-8 at stream byte offset {offset}: {exc.reason}", offset=offset
            ) from exc
        lines = (_LINE_BREAK.split(text) if self._saw_cr else text.split("\n"))[:-1]
        event_type = ""
        data: list[str] = []
        block_id: str | None = None
        retry: int | None = None
        for line in lines:
            if not line:
                continue  # the terminating blank line (or a leading one that dispatches nothing)
            if line[0] == ":":
                continue
            colon = line.find(":")
            if colon < 0:
                name, value = line, ""
            else:
                name = line[:colon]
                value = line[colon + 2 :] if line[colon + 1 : colon + 2] == " " else line[colon + 1 :]
            if name == "data":
                data.append(value)
            elif name == "event":
                event_type = value
            elif name == "id":
                if "\x00" not in value:
                    block_id = value
            elif name == "retry":
                if self._set_retry(value):
                    retry = self._retry
        if block_id is not None:
            self._last_event_id = block_id
        if not data:
            return None
        return ServerSentEvent(
            event_type or "message",
            "\n".join(data),
            self._last_event_id,
            block_id,
            retry,
            end - start,
            raw,
        )

    def _set_retry(self, value: str) -> bool:
        if value.isascii() and value.isdigit():
            self._retry = int(value)
            return True
        return False
