"""AWS event stream (``application/vnd.amazon.eventstream``): binary messages, each checked twice.

A message is a 12-byte prelude (total length, headers length, both big-endian uint32, then the
CRC32 of those 8 bytes), the headers, the payload, and the CRC32 of everything before it. A
header is a 1-byte name length, the UTF-8 name, a 1-byte value type and the value:

====  ==========  ==========================================
type  name        value
====  ==========  ==========================================
0 1   bool        none (0 is true, 1 is false)
2     byte        int8
3     short       int16, big-endian
4     integer     int32, big-endian
5     long        int64, big-endian
6     byte array  uint16 length, then the bytes
7     string      uint16 length, then UTF-8
8     timestamp   int64, milliseconds since the epoch
9     uuid        16 bytes
====  ==========  ==========================================

Strict: a prelude CRC mismatch, a length no message can have (total under 16, headers longer
than the room the total leaves), a message CRC mismatch, a header that runs past its section or
comes twice, an unknown value type or invalid UTF-8 raise ``DecodingError`` with the byte offset
of the message in the stream. A message longer than ``max_event_size`` raises
``EventTooLargeError`` as soon as its prelude is read, before its bytes are waited for. A
message cut off by EOF is no frame: its bytes are kept in ``unterminated`` as evidence, like an
SSE event without its blank line.

Binary has no character boundaries to respect: the prelude says how many bytes to wait for, so
any split of the body across reads decodes identically.
"""

from __future__ import annotations

import struct
from typing import NamedTuple
from zlib import crc32

from ..errors import DecodingError, EventTooLargeError, LocalProtocolError, StreamError
from ._sse import DEFAULT_MAX_EVENT_SIZE

__all__ = ["EventStreamDecoder", "EventStreamMessage", "HeaderValue", "encode_message"]

HeaderValue = bool | int | bytes | str
"""A header's value: bool, int (byte, short, integer, long, timestamp in ms), bytes (byte array,
uuid) or str."""

_PRELUDE = 12
_OVERHEAD = 16  # prelude and message CRC
_PRELUDE_FIELDS = struct.Struct(">III").unpack_from
_UINT32 = struct.Struct(">I").unpack_from
_CACHED_BLOCKS = 64  # distinct header blocks remembered per stream (a bound on the memory)
_CACHED_BLOCK_SIZE = 512
# fixed-width types: (width, signed); struct is not needed for whole big-endian integers
_FIXED = {2: 1, 3: 2, 4: 4, 5: 8, 8: 8}


class EventStreamMessage(NamedTuple):
    """One message: its headers in wire order, its payload, its size and bytes on the wire."""

    headers: dict[str, HeaderValue]
    payload: bytes
    nbytes: int
    raw: bytes

    @property
    def event(self) -> str | None:
        """The ``:event-type`` header (``:exception-type`` for an exception), if any."""
        name = self.headers.get(":event-type")
        if name is None:
            name = self.headers.get(":exception-type")
        return name if isinstance(name, str) else None


class EventStreamDecoder:
    """Incremental decoder with the same two methods as ``SSEDecoder``."""

    def __init__(self, max_event_size: int = DEFAULT_MAX_EVENT_SIZE) -> None:
        if max_event_size < _OVERHEAD:
            raise ValueError(f"max_event_size must be at least {_OVERHEAD}")
        self._max = max_event_size
        self._buf = bytearray()
        self._base = 0  # stream offset of self._buf[0]
        self._need = _PRELUDE  # bytes the next step waits for (prelude, then the whole message)
        self._total = 0  # the current message's length once its prelude is checked
        self._state = "open"
        self._header_cache: dict[bytes, dict[str, HeaderValue]] = {}

    @property
    def bytes_received(self) -> int:
        return self._base + len(self._buf)

    @property
    def bytes_dispatched(self) -> int:
        """Bytes before the first one not yet in a returned message."""
        return self._base

    @property
    def unterminated(self) -> bytes:
        """Bytes of a message the body never completed (after EOF); empty otherwise."""
        return bytes(self._buf) if self._state == "eof" else b""

    def receive_data(self, data: bytes) -> list[EventStreamMessage]:
        if self._state != "open":
            raise LocalProtocolError(f"receive_data() after the decoder {self._state}")
        if not data:
            return []
        buf = self._buf
        buf += data
        if len(buf) < self._need:
            return []
        messages: list[EventStreamMessage] = []
        try:
            self._messages(messages)
        except StreamError as err:
            self._state = "failed"
            err.events = messages
            raise
        return messages

    def receive_eof(self) -> list[EventStreamMessage]:
        if self._state != "open":
            raise LocalProtocolError(f"receive_eof() after the decoder {self._state}")
        self._state = "eof"
        return []

    def _messages(self, messages: list[EventStreamMessage]) -> None:
        buf = self._buf
        size = len(buf)
        start = 0
        total = self._total
        cache = self._header_cache
        append = messages.append
        with memoryview(buf) as view:  # released before the buffer is cut below
            while True:
                if not total:
                    if size - start < _PRELUDE:
                        break
                    total = self._prelude(view, start)
                if size - start < total:
                    break
                stop = start + total
                if crc32(view[start : stop - 4]) != _UINT32(buf, stop - 4)[0]:
                    offset = self._base + start
                    raise DecodingError(
                        f"event stream: message CRC32 mismatch in the message at byte offset "
                        f"{offset}",
                        offset=offset,
                    )
                raw = view[start:stop].tobytes()
                end = _PRELUDE + _UINT32(raw, 4)[0]
                # AWS services repeat the same few header blocks (one per event type): each
                # distinct block is parsed once.
                block = raw[_PRELUDE:end]
                headers = cache.get(block)
                if headers is None:
                    headers = _headers(raw, end, self._base + start)
                    if len(cache) < _CACHED_BLOCKS and len(block) <= _CACHED_BLOCK_SIZE:
                        cache[block] = headers
                append(EventStreamMessage(headers.copy(), raw[end:-4], total, raw))
                start = stop
                total = 0
        if start:
            del buf[:start]
            self._base += start
        self._total = total
        self._need = total or _PRELUDE

    def _prelude(self, view: memoryview, start: int) -> int:
        """The checked total length of the message that starts at ``start``."""
        total, headers, checksum = _PRELUDE_FIELDS(view, start)
        if crc32(view[start : start + 8]) != checksum:
            offset = self._base + start
            raise DecodingError(
                f"event stream: prelude CRC32 mismatch in the message at byte offset {offset}",
                offset=offset,
            )
        if total < _OVERHEAD or headers > total - _OVERHEAD:
            offset = self._base + start
            raise DecodingError(
                f"event stream: impossible lengths (total {total}, headers {headers}) in the "
                f"message at byte offset {offset}",
                offset=offset,
            )
        if total > self._max:
            offset = self._base + start
            raise EventTooLargeError(
                f"event stream message of {total} bytes at byte offset {offset} is larger than "
                f"max_event_size={self._max}",
                limit=self._max,
                offset=offset,
            )
        return int(total)


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One message with string headers (what AWS services send), for a message made here (an
    unbroken proxy's own exception at the end of a response cut short)."""
    encoded = b"".join(
        bytes([len(name.encode())]) + name.encode() + b"\x07"
        + len(value.encode()).to_bytes(2, "big") + value.encode()
        for name, value in headers.items()
    )
    total = _OVERHEAD + len(encoded) + len(payload)
    prelude = total.to_bytes(4, "big") + len(encoded).to_bytes(4, "big")
    message = prelude + crc32(prelude).to_bytes(4, "big") + encoded + payload
    return message + crc32(message).to_bytes(4, "big")


def _headers(raw: bytes, end: int, offset: int) -> dict[str, HeaderValue]:
    headers: dict[str, HeaderValue] = {}
    at = _PRELUDE
    try:
        while at < end:
            length = raw[at]
            if at + 2 + length > end:  # the name and its type byte
                break
            name = raw[at + 1 : at + 1 + length].decode()
            at += 1 + length
            kind = raw[at]
            at += 1
            value: HeaderValue
            if kind <= 1:
                value = kind == 0
            elif kind in _FIXED:
                width = _FIXED[kind]
                value = int.from_bytes(raw[at : at + width], "big", signed=True)
                at += width
            elif kind == 6 or kind == 7:
                size = int.from_bytes(raw[at : at + 2], "big")
                data = raw[at + 2 : at + 2 + size]
                at += 2 + size
                if at > end:
                    break
                value = data if kind == 6 else data.decode()
            elif kind == 9:
                value = raw[at : at + 16]
                at += 16
            else:
                raise DecodingError(
                    f"event stream: unknown header value type {kind} for {name!r} in the "
                    f"message at byte offset {offset}",
                    offset=offset,
                )
            if at > end:
                break
            if name in headers:
                raise DecodingError(
                    f"event stream: header {name!r} given twice in the message at byte offset "
                    f"{offset}",
                    offset=offset,
                )
            headers[name] = value
    except (IndexError, UnicodeDecodeError) as exc:
        raise DecodingError(
            f"event stream: unreadable header in the message at byte offset {offset}: {exc}",
            offset=offset,
        ) from exc
    if at != end:
        raise DecodingError(
            f"event stream: a header runs past the headers section in the message at byte "
            f"offset {offset}",
            offset=offset,
        )
    return headers
