"""A TCP relay on 127.0.0.1 that breaks connections on purpose, for tests.

    plan = lambda n: [Fault.reset(after=300, cut=Cut.INSIDE_CHAR)]   # faults of connection n
    with FaultRelay(target_port, plan=plan) as relay:
        httpx2.post(relay.url + "/v1/chat/completions", ...)   # the relay forwards to the target
        relay.stats().connections, relay.stats().bytes_to_client

It sits anywhere a TCP connection does: between a client and a proxy (target = the proxy's port)
or between a proxy and its upstream (give the proxy ``relay.url`` as the upstream). Each accepted
connection opens its own connection to the target and two pump threads copy bytes both ways.

Faults (``Fault``) act on one direction of one connection, at a byte position of that direction:
``after`` bytes already forwarded, then the first position that satisfies ``cut``:

- ``Cut.ANY``: exactly at ``after``;
- ``Cut.IN_BODY``: past the first HTTP head (the head arrives whole);
- ``Cut.INSIDE_CHAR``: the next byte is a UTF-8 continuation byte, so the bytes forwarded end
  inside a multi-byte character (only body bytes can hold one: HTTP heads are ASCII);
- ``Cut.INSIDE_LINE``: past the first HTTP head, between two bytes of which neither is CR or LF,
  so the cut falls inside a line of the body (mid-frame for SSE and NDJSON).

Kinds: ``reset`` (RST: SO_LINGER 0 then close, towards the receiving side; the sending side is
closed too), ``half_close`` (FIN towards the receiving side, the target connection closed),
``stall`` (nothing forwarded for ``seconds``), ``trickle`` (the next ``nbytes`` bytes sent one per
``send`` with ``seconds`` between them), ``delay`` (every later read held ``seconds`` before it is
forwarded). A connection may carry several faults; they apply in order of position.

Faults come from ``plan(n)`` for the n-th connection (0-based), from ``relay.queue(...)`` (for the
next one; wins over the plan), or on command for connections already open
(``relay.apply_now(fault)``, ``after`` counted from what each has forwarded so far).

``unit="exchange"`` makes the plan and the queue per HTTP exchange instead: a request that starts
on a connection after a response came back on it (keep-alive reuse, as an HTTP client's pool
does) is exchange n + 1, its faults' ``after`` counted from the start of that exchange, and any
fault of the previous exchange not yet applied is dropped.

Bounded: at most ``max_open`` connections at once (more are refused and counted), every wait is
interruptible, and the relay stops by itself after ``lifetime`` seconds; leaving the ``with``
block closes the listener and every connection and joins the threads (bounded joins).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from types import TracebackType
from typing import Literal

__all__ = ["Cut", "Direction", "Fault", "FaultRelay", "RelayStats"]

Direction = Literal["response", "request"]  # response: target -> client; request: client -> target
_READ = 65536
_JOIN_S = 5.0


class Cut(Enum):
    """Where, at or after ``Fault.after``, a fault takes effect."""

    ANY = "any"
    IN_BODY = "in-body"
    INSIDE_CHAR = "inside-char"
    INSIDE_LINE = "inside-line"


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    """One fault on one direction of a connection (build it with the class methods)."""

    kind: Literal["reset", "half_close", "stall", "trickle", "delay"]
    after: int = 0
    cut: Cut = Cut.ANY
    seconds: float = 0.0
    nbytes: int = 0
    direction: Direction = "response"

    @classmethod
    def reset(cls, after: int = 0, cut: Cut = Cut.ANY,
              direction: Direction = "response") -> Fault:
        return cls(kind="reset", after=after, cut=cut, direction=direction)

    @classmethod
    def half_close(cls, after: int = 0, cut: Cut = Cut.ANY,
                   direction: Direction = "response") -> Fault:
        return cls(kind="half_close", after=after, cut=cut, direction=direction)

    @classmethod
    def stall(cls, seconds: float, after: int = 0, cut: Cut = Cut.ANY,
              direction: Direction = "response") -> Fault:
        return cls(kind="stall", after=after, cut=cut, seconds=seconds, direction=direction)

    @classmethod
    def trickle(cls, nbytes: int, seconds: float = 0.001, after: int = 0, cut: Cut = Cut.ANY,
                direction: Direction = "response") -> Fault:
        return cls(kind="trickle", after=after, cut=cut, seconds=seconds, nbytes=nbytes,
                   direction=direction)

    @classmethod
    def delay(cls, seconds: float, after: int = 0, direction: Direction = "response") -> Fault:
        return cls(kind="delay", after=after, seconds=seconds, direction=direction)


@dataclass(frozen=True, slots=True)
class RelayStats:
    """Counts since the relay started (a snapshot)."""

    connections: int  # accepted and forwarded
    refused: int  # accepted past ``max_open`` (closed at once) or target unreachable
    open: int
    bytes_to_target: int
    bytes_to_client: int
    faults: dict[str, int]  # kind -> times applied


Plan = Callable[[int], Sequence[Fault]]


@dataclass
class _Pump:
    """One direction of one connection: its position, the faults still due, the cut state."""

    direction: Direction
    faults: list[Fault] = field(default_factory=list)
    forwarded: int = 0
    previous: int = -1  # last byte forwarded (-1: none yet)
    head_tail: bytes = b""  # last bytes, to find the end of the first HTTP head
    past_head: bool = False
    delay: float = 0.0
    trickle_left: int = 0
    half_closed: bool = False
    trickle_gap: float = 0.0

    def add(self, fault: Fault, relative: bool) -> None:
        if relative:
            fault = replace(fault, after=self.forwarded + fault.after)
        self.faults.append(fault)
        self.faults.sort(key=lambda f: f.after)

    def cut_at(self, data: bytes) -> tuple[int, Fault] | None:
        """The offset in ``data`` where the first due fault applies, if it does in ``data``."""
        if not self.faults:
            return None
        fault = self.faults[0]
        start = max(0, fault.after - self.forwarded)
        if start > len(data):
            return None
        if fault.cut is Cut.ANY:
            return start, fault
        if fault.cut in (Cut.IN_BODY, Cut.INSIDE_LINE) and not self.past_head:
            window = self.head_tail + data
            end = window.find(b"\r\n\r\n")
            if end < 0:
                return None
            start = max(start, end + 4 - len(self.head_tail))
        if fault.cut is Cut.IN_BODY:
            return (start, fault) if start <= len(data) else None
        for index in range(start, len(data)):
            if self._fits(fault.cut, data, index):
                return index, fault
        return None

    def _fits(self, cut: Cut, data: bytes, index: int) -> bool:
        nxt = data[index]
        if cut is Cut.INSIDE_CHAR:
            return 0x80 <= nxt <= 0xBF
        prev = data[index - 1] if index else self.previous
        return prev >= 0 and prev not in (10, 13) and nxt not in (10, 13)

    def advance(self, sent: bytes) -> None:
        if not sent:
            return
        self.forwarded += len(sent)
        self.previous = sent[-1]
        if not self.past_head:
            window = self.head_tail + sent
            self.past_head = b"\r\n\r\n" in window
            self.head_tail = window[-3:]


class _Connection:
    def __init__(self, relay: FaultRelay, client: socket.socket, target: socket.socket,
                 faults: Sequence[Fault]) -> None:
        self.relay = relay
        self.client = client
        self.target = target
        self.lock = threading.Lock()
        self.closed = False
        self.ended: set[Direction] = set()  # directions that forward nothing more
        self.fresh = True  # no exchange yet
        self.responded = False
        self.pumps: dict[Direction, _Pump] = {"response": _Pump("response"),
                                              "request": _Pump("request")}
        for fault in faults:
            self.pumps[fault.direction].add(fault, relative=False)
        self.threads = [
            threading.Thread(target=self._run, args=("request",), daemon=True,
                             name="fault-relay-request"),
            threading.Thread(target=self._run, args=("response",), daemon=True,
                             name="fault-relay-response"),
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def apply(self, fault: Fault) -> None:
        pump = self.pumps[fault.direction]
        if fault.after == 0 and fault.cut is Cut.ANY and fault.kind in ("reset", "half_close"):
            # Now, even while the pump waits for its next read.
            self.relay.count_fault(fault.kind)
            if fault.kind == "reset":
                self.close(reset=True, towards=self._ends(fault.direction)[1])
            else:
                self.half_close(pump)
            return
        with self.lock:
            pump.add(fault, relative=True)

    def half_close(self, pump: _Pump) -> None:
        """FIN towards the receiver, whose socket stays open for reading; the sender's
        connection is closed (the other pump then ends on its first write)."""
        source, destination = self._ends(pump.direction)
        pump.half_closed = True
        try:
            destination.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        _shut(source)
        source.close()

    def _note_exchange(self, direction: Direction) -> None:
        """Request bytes after response bytes start a new exchange with its own faults."""
        with self.lock:
            if direction == "response":
                self.responded = True
                return
            if not (self.responded or self.fresh):
                return
            self.responded = self.fresh = False
        faults = self.relay.next_exchange()
        with self.lock:
            for pump in self.pumps.values():
                pump.faults.clear()
                pump.delay = 0.0
                pump.trickle_left = 0
                pump.past_head, pump.head_tail = False, b""
            for fault in faults:
                self.pumps[fault.direction].add(fault, relative=True)

    def _ends(self, direction: Direction) -> tuple[socket.socket, socket.socket]:
        """(source, destination) of a direction."""
        if direction == "response":
            return self.target, self.client
        return self.client, self.target

    def _run(self, direction: Direction) -> None:
        source, destination = self._ends(direction)
        pump = self.pumps[direction]
        keep_open = False
        try:
            while not self.relay.stopping.is_set():
                data = source.recv(_READ)
                if pump.half_closed:
                    keep_open = True
                    return
                if not data:
                    # A clean EOF is passed on as a FIN; the other direction may go on.
                    destination.shutdown(socket.SHUT_WR)
                    keep_open = direction == "request"
                    return
                if self.relay.unit == "exchange":
                    self._note_exchange(direction)
                if pump.delay and self.relay.stopping.wait(pump.delay):
                    return
                ended = self._forward(pump, data, destination)
                if ended is not None:
                    keep_open = ended == "half_close"
                    return
        except OSError:
            keep_open = pump.half_closed
        finally:
            if keep_open:
                self._ended(direction)
            else:
                self.close(reset=False)

    def _ended(self, direction: Direction) -> None:
        """One direction forwards nothing more (its EOF passed on, or half-closed) while the
        other may go on; once both have ended, nothing can, and the connection is closed (else
        it would stay open, and counted, with no thread left to close it)."""
        with self.lock:
            self.ended.add(direction)
            both = len(self.ended) == 2
        if both:
            self.close(reset=False)

    def _forward(self, pump: _Pump, data: bytes, destination: socket.socket) -> str | None:
        """Forward ``data``, applying the faults that fall in it; why the pump ends, if it does."""
        while data:
            with self.lock:
                found = pump.cut_at(data)
                if found is not None:
                    pump.faults.pop(0)
            limit = len(data) if found is None else found[0]
            if limit and not self._send(pump, data[:limit], destination):
                return "stopped"
            data = data[limit:]
            if found is None:
                return None
            fault = found[1]
            self.relay.count_fault(fault.kind)
            if fault.kind == "reset":
                self.close(reset=True, towards=destination)
                return "reset"
            if fault.kind == "half_close":
                self.half_close(pump)
                return "half_close"
            if fault.kind == "stall":
                if self.relay.stopping.wait(fault.seconds):
                    return "stopped"
            elif fault.kind == "delay":
                pump.delay = fault.seconds
            else:  # trickle
                pump.trickle_left, pump.trickle_gap = fault.nbytes, fault.seconds
        return None

    def _send(self, pump: _Pump, data: bytes, destination: socket.socket) -> bool:
        """Send ``data`` (its first bytes one at a time while a trickle lasts); False: stopped."""
        slow = data[:pump.trickle_left]
        for index in range(len(slow)):
            pump.advance(slow[index:index + 1])
            destination.sendall(slow[index:index + 1])
            pump.trickle_left -= 1
            if pump.trickle_gap and self.relay.stopping.wait(pump.trickle_gap):
                return False
        if len(data) > len(slow):
            # Counted before the send: a reader of the counts who has the bytes sees them.
            pump.advance(data[len(slow):])
            destination.sendall(data[len(slow):])
        return True

    def close(self, *, reset: bool, towards: socket.socket | None = None) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        if reset and towards is not None:
            # SHUT_RD wakes a thread blocked reading this socket without sending anything (a
            # close alone would not, and the RST would wait for that read); SO_LINGER with a
            # zero timeout then makes close() send RST instead of FIN.
            try:
                towards.shutdown(socket.SHUT_RD)
            except OSError:
                pass
            towards.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        for sock in (self.client, self.target):
            if sock is not towards:
                _shut(sock)
            sock.close()
        self.relay.forget(self)


def _shut(sock: socket.socket) -> None:
    """Shut both directions down (this wakes a thread blocked on the socket); never raises."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class FaultRelay:
    """Forward 127.0.0.1:``port`` to ``target_host``:``target_port``, breaking it as planned."""

    def __init__(self, target_port: int, *, target_host: str = "127.0.0.1",
                 plan: Plan | None = None, unit: Literal["connection", "exchange"] = "connection",
                 max_open: int = 256, lifetime: float = 600.0) -> None:
        self.target = (target_host, target_port)
        self.unit = unit
        self._exchanges = 0
        self._plan = plan
        self._queued: list[Sequence[Fault]] = []
        self._max_open = max_open
        self._lifetime = lifetime
        self._lock = threading.Lock()
        self._open: set[_Connection] = set()
        self._all: list[_Connection] = []
        self._connections = 0
        self._refused = 0
        self._faults: Counter[str] = Counter()
        self.stopping = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self._listener.settimeout(0.05)  # the accept loop looks at ``stopping`` this often
        self.port: int = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept, daemon=True,
                                          name="fault-relay-accept")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultRelay:
        self._started = time.monotonic()
        self._acceptor.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def set_plan(self, plan: Plan | None) -> None:
        """Faults for connections accepted from now on (``None``: none)."""
        with self._lock:
            self._plan = plan

    def queue(self, *faults: Fault) -> None:
        """Faults for the next connection (or exchange) that starts; wins over the plan."""
        with self._lock:
            self._queued.append(faults)

    def clear_queue(self) -> int:
        """Drop the queued faults no connection (or exchange) took; how many sets."""
        with self._lock:
            dropped = len(self._queued)
            self._queued.clear()
        return dropped

    def apply_now(self, fault: Fault) -> int:
        """Apply ``fault`` to every open connection, ``after`` bytes from now; how many."""
        with self._lock:
            connections = list(self._open)
        for connection in connections:
            connection.apply(fault)
        return len(connections)

    def reset_all(self) -> int:
        """Reset every open connection at once; how many."""
        return self.apply_now(Fault.reset())

    def stats(self) -> RelayStats:
        with self._lock:
            connections = list(self._all)
            return RelayStats(
                connections=self._connections, refused=self._refused, open=len(self._open),
                bytes_to_target=sum(c.pumps["request"].forwarded for c in connections),
                bytes_to_client=sum(c.pumps["response"].forwarded for c in connections),
                faults=dict(self._faults),
            )

    def count_fault(self, kind: str) -> None:
        with self._lock:
            self._faults[kind] += 1

    def forget(self, connection: _Connection) -> None:
        with self._lock:
            self._open.discard(connection)

    def stop(self) -> None:
        """Close the listener and every connection; join the threads (bounded)."""
        self.stopping.set()
        if self._acceptor.is_alive():
            self._acceptor.join(_JOIN_S)
        self._listener.close()
        with self._lock:
            connections = list(self._open)
        for connection in connections:
            connection.close(reset=False)
        for connection in self._all:
            for thread in connection.threads:
                if thread.is_alive():
                    thread.join(_JOIN_S)

    def join_acceptor(self, timeout: float = _JOIN_S) -> None:
        """Wait (bounded) until the relay accepts no more connections."""
        self._acceptor.join(timeout)

    def next_exchange(self) -> Sequence[Fault]:
        """The faults of an exchange that starts now (``unit="exchange"``)."""
        with self._lock:
            index = self._exchanges
            self._exchanges += 1
        return self._faults_for(index)

    def _faults_for(self, index: int) -> Sequence[Fault]:
        with self._lock:
            if self._queued:
                return self._queued.pop(0)
            plan = self._plan
        return plan(index) if plan is not None else ()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            if time.monotonic() - self._started > self._lifetime:
                self.stopping.set()
                break
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            client.settimeout(None)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                full = len(self._open) >= self._max_open
                self._refused += full  # counted before the client can see the close
            if full:
                client.close()
                continue
            try:
                target = socket.create_connection(self.target, timeout=10)
            except OSError:
                # The client sees the refusal as a reset, as it would without the relay.
                with self._lock:
                    self._refused += 1
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.close()
                continue
            target.settimeout(None)
            target.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                index = self._connections
                self._connections += 1
            faults = self._faults_for(index) if self.unit == "connection" else ()
            connection = _Connection(self, client, target, faults)
            with self._lock:
                self._open.add(connection)
                self._all.append(connection)
            connection.start()
        # Stopped by itself (lifetime) or by ``stop()``: nothing stays open.
        self._listener.close()
        with self._lock:
            connections = list(self._open)
        for connection in connections:
            connection.close(reset=False)
