"""Newline-delimited JSON (Ollama's ``/api/chat`` and ``/api/generate``): one JSON value per line.

Lines end in LF (a CR before it is tolerated); blank lines are skipped; a final line without LF
is a value at EOF. Each line is parsed once, when complete.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .._jsonparse import BACKEND, loads
from ..errors import (
    DecodingError,
    EventTooLargeError,
    LocalProtocolError,
    PayloadError,
    StreamError,
)
from ._sse import DEFAULT_MAX_EVENT_SIZE

__all__ = ["JSONLine", "NDJSONDecoder"]

# orjson reads bytes as strict UTF-8. The standard json.loads(bytes) does not: it sniffs UTF-16/32
# from NUL bytes and lets encoded surrogates through, so its input is decoded strictly first.
_LOADS_BYTES = BACKEND == "orjson"
_BLANK = b" \t\r\n"


class JSONLine(NamedTuple):
    """One parsed line: ``line`` is its 1-based line number, ``raw`` its bytes on the wire.

    Lines compare (and hash) by ``value``, ``line`` and ``nbytes``, the contract's fields:
    ``raw`` is evidence, not value.
    """

    value: Any
    line: int
    nbytes: int
    raw: bytes = b""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, tuple):
            return NotImplemented
        return self[:3] == other[:3]

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, tuple):
            return NotImplemented
        return self[:3] != other[:3]

    def __hash__(self) -> int:
        return hash(self[:3])


class NDJSONDecoder:
    """Incremental NDJSON decoder with the same two methods as ``SSEDecoder``."""

    def __init__(self, max_event_size: int = DEFAULT_MAX_EVENT_SIZE) -> None:
        if max_event_size < 1:
            raise ValueError("max_event_size must be positive")
        self._max = max_event_size
        self._buf = bytearray()
        self._base = 0  # stream offset of self._buf[0]
        self._scan = 0
        self._lineno = 0
        self._state = "open"
        self._unterminated = b""

    @property
    def bytes_received(self) -> int:
        return self._base + len(self._buf)

    @property
    def bytes_dispatched(self) -> int:
        """Bytes before the first one not yet in a returned line or a skipped blank one."""
        return self._base

    @property
    def unterminated(self) -> bytes:
        """A final line without LF that did not parse at EOF (the body was cut inside it), without
        surrounding whitespace. Empty otherwise: a final line that parses is a value."""
        return self._unterminated

    def receive_data(self, data: bytes) -> list[JSONLine]:
        if self._state != "open":
            raise LocalProtocolError(f"receive_data() after the decoder {self._state}")
        if not data:
            return []
        self._buf += data
        return self._guarded(final=False)

    def receive_eof(self) -> list[JSONLine]:
        if self._state != "open":
            raise LocalProtocolError(f"receive_eof() after the decoder {self._state}")
        lines = self._guarded(final=True)
        self._state = "eof"
        return lines

    def _guarded(self, *, final: bool) -> list[JSONLine]:
        lines: list[JSONLine] = []
        try:
            self._next_lines(lines, final)
        except StreamError as err:
            self._state = "failed"
            err.events = lines
            raise
        return lines

    def _next_lines(self, lines: list[JSONLine], final: bool) -> None:
        buf = self._buf
        start = 0
        while True:
            end = buf.find(b"\n", max(start, self._scan))
            if end < 0:
                if len(buf) - start > self._max:
                    self._too_large(start)
                self._scan = len(buf)
                if not final or start == len(buf):
                    break
                end = len(buf) - 1  # the last line, without its LF
                stop = len(buf)
            else:
                stop = end + 1
            if stop - start > self._max:
                self._too_large(start)
            raw = bytes(buf[start:stop])
            self._lineno += 1
            body = raw.strip(_BLANK)
            if body:
                if raw[-1] != 0x0A:  # the last line, without its LF: evidence until it parses
                    self._unterminated = body
                lines.append(JSONLine(self._load(raw, body, start), self._lineno, len(raw), raw))
                self._unterminated = b""
            start = self._scan = stop
            if stop == len(buf):
                break
        del buf[:start]
        self._base += start
        self._scan -= start

    def _load(self, raw: bytes, body: bytes, start: int) -> Any:
        try:
            return loads(body if _LOADS_BYTES else body.decode("utf-8"))
        except ValueError as exc:  # UnicodeDecodeError is a ValueError too
            offset = self._base + start
            try:
                body.decode("utf-8")
            except UnicodeDecodeError as bad:
                at = offset + len(raw) - len(raw.lstrip(_BLANK)) + bad.start
                raise DecodingError(
                    f"invalid UTF-8 at stream byte offset {at} (line {self._lineno})", offset=at
                ) from exc
            raise PayloadError(
                f"malformed JSON on line {self._lineno} at byte offset {offset}: {exc}",
                line=self._lineno,
                offset=offset,
            ) from exc

    def _too_large(self, start: int) -> None:
        raise EventTooLargeError(
            f"line {self._lineno + 1} larger than max_event_size={self._max} bytes",
            limit=self._max,
            offset=self._base + start,
        )
