"""Raw text streams: bytes in, whole characters out, the incomplete tail kept for the next read."""

from __future__ import annotations

import codecs

from ..errors import DecodingError, LocalProtocolError, TruncatedError

__all__ = ["Utf8Decoder"]


class Utf8Decoder:
    """Strict incremental UTF-8 on the standard library's incremental decoder.

    ``receive_data`` returns only whole characters; ``receive_eof`` raises ``TruncatedError`` if
    bytes of an unfinished character are left. Invalid bytes raise ``DecodingError`` with their
    offset in the stream, never a silent U+FFFD; the text decoded before them in the same call is
    on the error's ``events`` (one string).
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self._received = 0
        self._state = "open"

    @property
    def pending(self) -> bytes:
        """Bytes of an incomplete character held back for the next read."""
        return self._decoder.getstate()[0]

    def receive_data(self, data: bytes) -> str:
        if self._state != "open":
            raise LocalProtocolError(f"receive_data() after the decoder {self._state}")
        return self._decode(data, final=False)

    def receive_eof(self) -> str:
        if self._state != "open":
            raise LocalProtocolError(f"receive_eof() after the decoder {self._state}")
        tail = self.pending
        if tail:
            self._state = "failed"
            raise TruncatedError(
                f"stream ended inside a UTF-8 character ({len(tail)} of its bytes received)",
                tail=tail,
            )
        self._state = "eof"
        return ""

    def _decode(self, data: bytes, *, final: bool) -> str:
        held = len(self.pending)
        try:
            text = self._decoder.decode(data, final)
        except UnicodeDecodeError as exc:
            self._state = "failed"
            offset = self._received - held + exc.start
            # The whole characters before the bad byte are not lost: they ride on the error.
            text = exc.object[: exc.start].decode("utf-8")
            raise DecodingError(
                f"invalid UTF-8 at stream byte offset {offset}: {exc.reason}",
                offset=offset,
                events=[text] if text else [],
            ) from exc
        self._received += len(data)
        return text
