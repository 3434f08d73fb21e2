"""The proxy's HTTP/1.1 protocol: uvicorn's httptools protocol with a bound on the request head.

httptools (llhttp) reads a request line and headers of any size, and uvicorn keeps them all in
memory before the app sees the request: a 2 MB header was read whole and answered 200. Every
buffer of the proxy has a limit, so this protocol counts the bytes read while a request head is
still incomplete and, past ``MAX_REQUEST_HEAD``, answers ``431`` with ``connection: close``
instead of feeding the parser more. Memory held for a head is then at most the limit plus one
network read. (uvicorn's h11 protocol has such a bound, ``h11_max_incomplete_event_size``; the
proxy runs httptools for its speed.)
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

__all__ = ["MAX_REQUEST_HEAD", "BoundedHeadProtocol"]

MAX_REQUEST_HEAD = 64 * 1024
"""Bytes of request line and headers one request may have (browsers and SDKs send < 8 KiB)."""

_REFUSAL = f"request head larger than {MAX_REQUEST_HEAD} bytes".encode()


class BoundedHeadProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` that refuses a request head over ``MAX_REQUEST_HEAD`` with 431."""

    _in_head = True  # a connection starts with a head; after it, a body until the next begins
    _head_bytes = 0
    _refused = False

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = 0

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        # Counted after the parser has seen the read: a read that completes the head (and
        # carries body bytes after it) is never held against the head.
        if self._in_head:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_REQUEST_HEAD:
                self._refuse()

    def _refuse(self) -> None:
        self._refused = True
        self.transport.write(b"".join([
            STATUS_LINE[431],
            b"content-type: text/plain; charset=utf-8\r\n",
            b"content-length: " + str(len(_REFUSAL)).encode("ascii") + b"\r\n",
            b"connection: close\r\n\r\n",
            _REFUSAL,
        ]))
        self.transport.close()
