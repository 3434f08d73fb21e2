"""What the drivers share about httpx2: timeouts, its exceptions mapped to ours, and the sync
driver's read watchdog."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from functools import cache

import httpx2

from ..errors import ConnectTimeout, StreamError, TransportError
from .session import StreamSession

__all__ = [
    "BODY_EXCERPT",
    "ReadWatchdog",
    "as_stream_error",
    "cut_body",
    "default_ssl_context",
    "httpx_timeout",
]

BODY_EXCERPT = 2048  # bytes of a non-2xx body kept on UpstreamStatusError


@cache
def default_ssl_context() -> ssl.SSLContext:
    """The default client's SSL context, built once: loading the CA bundle takes ~50-100 ms, too
    much to pay on every ``stream()`` call made without ``client=``."""
    return httpx2.create_ssl_context()


def httpx_timeout(session: StreamSession) -> httpx2.Timeout:
    read = session.socket_read_timeout()
    return httpx2.Timeout(
        connect=session.deadlines.connect, read=read, write=session.deadlines.connect, pool=None
    )


def as_stream_error(exc: httpx2.HTTPError, session: StreamSession) -> StreamError:
    """httpx2's exception as unbroken's, chained, so callers never need to import httpx2."""
    err: StreamError
    if isinstance(exc, httpx2.ConnectTimeout | httpx2.PoolTimeout):
        seconds = session.deadlines.connect or 0.0
        err = ConnectTimeout(f"no connection within {seconds} s", seconds=seconds)
    elif isinstance(exc, httpx2.TimeoutException):
        # A read that saw no byte at all for the socket deadline: report the content deadline
        # that applies at this point of the stream.
        due = session.overdue()
        err = due if due is not None else TransportError(f"{type(exc).__name__}: {exc}")
    else:
        err = TransportError(f"{type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err


def cut_body() -> TransportError:
    """The body ended cleanly but the stream did not: for retry and resume, a broken connection."""
    return TransportError("the body ended without a finish reason")


class ReadWatchdog:
    """Cuts a blocked sync read when the nearest content deadline passes.

    httpx2 fixes one read timeout for a whole response, so a read on a connection that sends no
    byte at all would wait for the longest deadline that may apply (``socket_read_timeout``).
    The sync driver arms this watchdog with the nearest deadline around each read only (a slow
    consumer between reads is not the server's fault); when the deadline passes mid-read, the
    watchdog shuts the socket down, the read ends, and the driver reports the deadline. One
    daemon thread per stream, started on first use.

    Arming happens once per HTTP chunk, so it takes no lock while the thread already sleeps
    until a time no later than the new deadline: it will look again by then. The thread clears
    ``_wakes_at`` before it reads the state and ``arm`` stores the state before it reads
    ``_wakes_at``, so one of them always sees the other.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._sock: socket.socket | None = None
        self._due: float | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        self._wakes_at: float | None = None  # when the thread looks next; None: on notify only

    @staticmethod
    def socket_of(response: httpx2.Response) -> socket.socket | None:
        stream = response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        return sock if isinstance(sock, socket.socket) else None

    def arm(self, sock: socket.socket | None, due: float | None) -> None:
        """A read on ``sock`` is about to block; cut it at ``due`` (monotonic seconds)."""
        if sock is None or due is None:
            return
        self._sock, self._due = sock, due
        wakes_at = self._wakes_at
        if wakes_at is not None and wakes_at <= due:
            return
        with self._cond:
            if self._closed:
                self._sock = self._due = None
                return
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="unbroken-read-watchdog", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def disarm(self) -> None:
        self._sock = self._due = None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._sock = self._due = None
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                self._wakes_at = None
                sock, due = self._sock, self._due
                if sock is None or due is None:
                    self._cond.wait()
                    continue
                left = due - time.monotonic()
                if left > 0:
                    self._wakes_at = due
                    self._cond.wait(left)
                    continue
                self._sock = self._due = None
                try:
                    # shutdown, not close: it wakes a recv() blocked in another thread.
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
