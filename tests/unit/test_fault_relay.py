"""The test helper ``tests/fault_relay.py``: every fault, at the byte it promises, and its counts.

A small target on 127.0.0.1 answers each request (a line ending in a blank line) with one fixed
HTTP response whose body holds multi-byte UTF-8 characters, then closes; the client reads it
through the relay with plain sockets, so nothing between the relay and the assertions buffers.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from tests.fault_relay import Cut, Fault, FaultRelay

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"
BODY = "data: 你好世界\n\ndata: ü and 🙂 again\n\n".encode()
RESPONSE = HEAD + BODY
REQUEST = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"


@contextmanager
def target(response: bytes = RESPONSE, hold: threading.Event | None = None) -> Iterator[int]:
    """A server that answers each request with ``response`` (after ``hold`` is set, if given)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    stopping = threading.Event()
    received: list[bytes] = []

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    data += chunk
                received.append(data)
                if hold is not None:
                    conn.sendall(response[:len(HEAD)])
                    hold.wait(10)
                    conn.sendall(response[len(HEAD):])
                else:
                    conn.sendall(response)
            except OSError:
                return

    def accept() -> None:
        while not stopping.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stopping.set()
        thread.join(5)
        listener.close()


def fetch(port: int, request: bytes = REQUEST, timeout: float = 10) -> tuple[bytes, str]:
    """Everything the client receives, and how it ended: ``eof``, ``reset`` or ``timeout``."""
    got = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        while True:
            try:
                chunk = sock.recv(4096)
            except ConnectionResetError:
                return got, "reset"
            except TimeoutError:
                return got, "timeout"
            if not chunk:
                return got, "eof"
            got += chunk


def test_forwards_both_ways_and_counts() -> None:
    with target() as port, FaultRelay(port) as relay:
        assert fetch(relay.port) == (RESPONSE, "eof")
        assert fetch(relay.port) == (RESPONSE, "eof")
        stats = relay.stats()
    assert (stats.connections, stats.refused, stats.faults) == (2, 0, {})
    assert stats.bytes_to_client == 2 * len(RESPONSE)
    assert stats.bytes_to_target == 2 * len(REQUEST)


@pytest.mark.parametrize("after", [0, 1, len(HEAD), len(HEAD) + 7, len(RESPONSE) - 1])
def test_reset_after_exactly_n_bytes(after: int) -> None:
    with target() as port, FaultRelay(port, plan=lambda n: [Fault.reset(after=after)]) as relay:
        assert fetch(relay.port) == (RESPONSE[:after], "reset")
        assert relay.stats().faults == {"reset": 1}


@pytest.mark.parametrize("after", range(0, len(RESPONSE), 6))
def test_reset_inside_a_character(after: int) -> None:
    inside = [i for i in range(after, len(RESPONSE)) if 0x80 <= RESPONSE[i] <= 0xBF]
    with target() as port, FaultRelay(
            port, plan=lambda n: [Fault.reset(after=after, cut=Cut.INSIDE_CHAR)]) as relay:
        got, end = fetch(relay.port)
    if not inside:  # no character left to cut: the fault never applies
        assert (got, end, relay.stats().faults) == (RESPONSE, "eof", {})
        return
    assert (got, end) == (RESPONSE[:inside[0]], "reset")
    with pytest.raises(UnicodeDecodeError):
        got.decode()  # the bytes end inside a character


@pytest.mark.parametrize("after", [0, 20, len(HEAD) + 6, len(HEAD) + 20])
def test_reset_inside_a_line_of_the_body(after: int) -> None:
    with target() as port, FaultRelay(
            port, plan=lambda n: [Fault.reset(after=after, cut=Cut.INSIDE_LINE)]) as relay:
        got, end = fetch(relay.port)
    assert end == "reset"
    cut = len(got)
    assert cut >= max(after, len(HEAD) + 1)
    assert RESPONSE[cut - 1] not in b"\r\n" and RESPONSE[cut] not in b"\r\n"
    assert got == RESPONSE[:cut]


@pytest.mark.parametrize("after", [0, 10, len(HEAD), len(HEAD) + 9])
def test_reset_in_the_body(after: int) -> None:
    with target() as port, FaultRelay(
            port, plan=lambda n: [Fault.reset(after=after, cut=Cut.IN_BODY)]) as relay:
        assert fetch(relay.port) == (RESPONSE[:max(after, len(HEAD))], "reset")


def test_half_close_is_a_clean_eof_after_n_bytes() -> None:
    with target() as port, FaultRelay(port, plan=lambda n: [Fault.half_close(after=70)]) as relay:
        assert fetch(relay.port) == (RESPONSE[:70], "eof")
        assert relay.stats().faults == {"half_close": 1}


def test_stall_holds_the_rest_until_it_ends_or_the_relay_stops() -> None:
    with target() as port:
        relay = FaultRelay(port, plan=lambda n: [Fault.stall(60, after=len(HEAD))])
        with relay:
            assert fetch(relay.port, timeout=0.5) == (HEAD, "timeout")
        # Leaving the block ended the stall: the relay's threads are gone, not sleeping 60 s.
        assert not any(t.name.startswith("fault-relay") and t.is_alive()
                       for t in threading.enumerate())
        short = FaultRelay(port, plan=lambda n: [Fault.stall(0.05, after=10)])
        with short:
            assert fetch(short.port) == (RESPONSE, "eof")
            assert short.stats().faults == {"stall": 1}


def test_trickle_sends_one_byte_per_write_and_delay_loses_nothing() -> None:
    # The trickle spans reads: the target writes the head and the body separately.
    hold = threading.Event()
    hold.set()
    with target(hold=hold) as port, FaultRelay(
            port, plan=lambda n: [Fault.trickle(40, seconds=0.0, after=len(HEAD) - 20),
                                  Fault.delay(0.01, after=len(HEAD) + 30)]) as relay:
        assert fetch(relay.port) == (RESPONSE, "eof")
        assert relay.stats().faults == {"trickle": 1, "delay": 1}


def test_a_request_side_fault_resets_the_target() -> None:
    with target() as port, FaultRelay(
            port, plan=lambda n: [Fault.reset(after=5, direction="request")]) as relay:
        got, end = fetch(relay.port)
        assert got == b""
        assert end in ("eof", "reset")  # the client's side is closed, the target's reset
        assert relay.stats().bytes_to_target == 5


def test_plan_queue_and_commands() -> None:
    hold = threading.Event()
    with target(hold=hold) as port, FaultRelay(
            port, plan=lambda n: [Fault.reset(after=3)] if n % 2 == 0 else []) as relay:
        hold.set()
        assert fetch(relay.port) == (RESPONSE[:3], "reset")  # connection 0: planned
        assert fetch(relay.port) == (RESPONSE, "eof")  # connection 1: clean
        relay.queue(Fault.half_close(after=9))
        assert fetch(relay.port) == (RESPONSE[:9], "eof")  # queued wins over the plan
        relay.set_plan(None)
        assert fetch(relay.port) == (RESPONSE, "eof")
        # On command: a connection already open, waiting for its body, is reset now.
        for _ in range(3000):  # bounded: the connections above close in their own threads
            if relay.stats().open == 0:
                break
            threading.Event().wait(0.01)
        assert relay.stats().open == 0  # else reset_all below would count a closing one too
        hold.clear()
        with socket.create_connection(("127.0.0.1", relay.port), timeout=10) as sock:
            sock.sendall(REQUEST)
            got = b""
            while len(got) < len(HEAD):
                got += sock.recv(4096)
            assert got == HEAD
            assert relay.reset_all() == 1
            with pytest.raises(ConnectionResetError):
                while sock.recv(4096):
                    pass
        relay.queue()
        with socket.create_connection(("127.0.0.1", relay.port), timeout=10) as sock:
            sock.sendall(REQUEST)
            for _ in range(500):  # bounded
                if relay.stats().open == 1:
                    break
                threading.Event().wait(0.01)
            assert relay.stats().open == 1
            assert relay.apply_now(Fault.half_close()) == 1
            got = b""
            while chunk := sock.recv(4096):
                got += chunk
            assert HEAD.startswith(got)  # EOF at once, with what was forwarded before it
        hold.set()
        assert relay.stats().connections == 6
        assert relay.stats().faults == {"reset": 2, "half_close": 2}


def test_a_connection_both_of_whose_directions_ended_is_closed() -> None:
    # The client's EOF is passed on first (the request direction ends, the response one may go
    # on), then the response direction is half-closed: nothing can flow any more, and no pump is
    # left to close the connection but the one that ends last.
    hold = threading.Event()
    with target(hold=hold) as port, FaultRelay(port) as relay:
        with socket.create_connection(("127.0.0.1", relay.port), timeout=10) as sock:
            sock.sendall(REQUEST)
            sock.shutdown(socket.SHUT_WR)
            got = b""
            while len(got) < len(HEAD):
                got += sock.recv(4096)
            assert relay.apply_now(Fault.half_close()) == 1
            assert sock.recv(4096) == b""  # FIN
            for _ in range(500):  # bounded: the pumps end in their own threads
                if relay.stats().open == 0:
                    break
                threading.Event().wait(0.01)
            assert relay.stats().open == 0  # closed while the client still holds its socket
        hold.set()
        assert relay.stats().faults == {"half_close": 1}


def test_bounded_open_connections_and_lifetime() -> None:
    hold = threading.Event()
    with target(hold=hold) as port, FaultRelay(port, max_open=1) as relay:
        with socket.create_connection(("127.0.0.1", relay.port), timeout=10) as first:
            first.sendall(REQUEST)
            got = b""
            while len(got) < len(HEAD):
                got += first.recv(4096)
            assert fetch(relay.port)[0] == b""  # refused: one is open
            hold.set()
        assert relay.stats().refused == 1
    with target() as port:
        relay = FaultRelay(port, lifetime=0.0)
        with relay:
            assert relay.stopping.wait(10)  # stopped by itself
            relay.join_acceptor()
            with pytest.raises(ConnectionRefusedError):
                fetch(relay.port)


def test_per_exchange_faults_on_a_reused_connection() -> None:
    # A keep-alive target: answers every request on the connection until the client closes.
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while True:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                data += chunk
                while b"\r\n\r\n" in data:
                    _, _, data = data.partition(b"\r\n\r\n")
                    conn.sendall(RESPONSE)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    faults = {1: [Fault.reset(after=len(HEAD) + 2, cut=Cut.INSIDE_CHAR)]}
    with FaultRelay(listener.getsockname()[1], unit="exchange",
                    plan=lambda n: faults.get(n, [])) as relay:
        with socket.create_connection(("127.0.0.1", relay.port), timeout=10) as sock:
            for exchange in range(2):
                sock.sendall(REQUEST)
                got = b""
                try:
                    while len(got) < len(RESPONSE):
                        chunk = sock.recv(4096)
                        assert chunk
                        got += chunk
                except ConnectionResetError:
                    assert exchange == 1
                    # Counted from the start of exchange 1: inside the first character.
                    assert got == RESPONSE[:len(HEAD) + 7]
                else:
                    assert (exchange, got) == (0, RESPONSE)
        assert relay.stats().faults == {"reset": 1}
    thread.join(10)
    listener.close()
