"""httpx2's exceptions mapped to unbroken's, and the sync driver's read watchdog (on a local
socket pair: a read blocked in this thread is cut by the watchdog's thread)."""

from __future__ import annotations

import random
import socket
import time

import httpx2
import pytest

from unbroken.client import Deadlines, Retry
from unbroken.client.session import StreamSession
from unbroken.client.transport import ReadWatchdog, as_stream_error, httpx_timeout
from unbroken.errors import ConnectTimeout, FirstEventTimeout, TransportError


def session(deadlines: Deadlines) -> StreamSession:
    s = StreamSession(
        "POST", "http://127.0.0.1:1/", dialect="openai-chat", content=None, headers={},
        retry=Retry(), resume="auto", deadlines=deadlines, trace=False, started=0.0,
        rng=random.Random(0),
    )
    s.next_request(0.0)
    return s


def test_connect_and_pool_timeouts_are_connect_timeouts() -> None:
    s = session(Deadlines(connect=2.5))
    for exc in (httpx2.ConnectTimeout("slow"), httpx2.PoolTimeout("busy")):
        err = as_stream_error(exc, s)
        assert isinstance(err, ConnectTimeout)
        assert err.seconds == 2.5
        assert err.__cause__ is exc


def test_a_read_timeout_is_the_content_deadline_that_applies() -> None:
    exc = httpx2.ReadTimeout("nothing")
    err = as_stream_error(exc, session(Deadlines(first_event=4.0)))
    assert isinstance(err, FirstEventTimeout)
    assert err.seconds == 4.0
    assert err.__cause__ is exc
    bare = as_stream_error(exc, session(Deadlines(first_event=None, idle=None)))
    assert type(bare) is TransportError


def test_other_errors_are_transport_errors_chained() -> None:
    exc = httpx2.RemoteProtocolError("peer closed connection")
    err = as_stream_error(exc, session(Deadlines()))
    assert type(err) is TransportError
    assert str(err) == "RemoteProtocolError: peer closed connection"
    assert err.__cause__ is exc
    assert not isinstance(err, httpx2.HTTPError)


def test_the_httpx_timeout_follows_the_deadlines() -> None:
    timeout = httpx_timeout(session(Deadlines(connect=3.0, first_event=7.0, idle=5.0)))
    assert (timeout.connect, timeout.read, timeout.write, timeout.pool) == (3.0, 7.0, 3.0, None)


@pytest.mark.timeout(10)
def test_the_watchdog_cuts_a_blocked_read_at_the_deadline() -> None:
    watchdog = ReadWatchdog()
    near, far = socket.socketpair()
    try:
        near.settimeout(5.0)  # a bound in case the watchdog failed: the test would then fail
        watchdog.arm(near, time.monotonic() + 0.2)
        assert near.recv(10) == b""  # shut down: the read returns at once, no timeout
        watchdog.disarm()
    finally:
        watchdog.close()
        near.close()
        far.close()


@pytest.mark.timeout(10)
def test_a_disarmed_watchdog_leaves_the_socket_alone() -> None:
    watchdog = ReadWatchdog()
    near, far = socket.socketpair()
    try:
        watchdog.arm(near, time.monotonic() + 0.05)
        watchdog.disarm()  # the read ended before the deadline
        time.sleep(0.15)
        far.sendall(b"still open")
        near.settimeout(2.0)
        assert near.recv(10) == b"still open"
    finally:
        watchdog.close()
        near.close()
        far.close()


def test_without_a_socket_or_a_deadline_no_thread_is_started() -> None:
    watchdog = ReadWatchdog()
    near, far = socket.socketpair()
    try:
        watchdog.arm(None, 1.0)
        watchdog.arm(near, None)
        assert watchdog._thread is None
    finally:
        watchdog.close()
        near.close()
        far.close()


def test_a_closed_watchdog_is_never_armed_again() -> None:
    watchdog = ReadWatchdog()
    watchdog.close()
    near, far = socket.socketpair()
    try:
        watchdog.arm(near, time.monotonic())
        assert watchdog._thread is None
    finally:
        near.close()
        far.close()
