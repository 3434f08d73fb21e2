"""``unbroken proxy --workers N``: N worker processes serving one port, on one journal.

The parent binds the port (and, with ``--worker-ports BASE``, port ``BASE + i`` for worker ``i``
alone, to reach one worker's ``/metrics`` or ``/healthz``), then starts each worker as
``python -m unbroken.proxy`` with the same flags and the listening sockets inherited
(``--worker-socket FD``, not for users). The kernel hands each connection to one worker; each
worker is a whole proxy (its own producers, leases, drain), so a stream is produced by the
worker that took its request, and read from any: the journal is what they share.

- The store must be shared by processes: SQLite (readers in one worker follow another's live
  tail through its commit notices, ``streams/journal/sqlite_notices.py``) or Redis. ``memory://``
  is refused: each worker would have its own.
- A worker that dies is started again (after a pause that doubles, up to ``_MAX_PAUSE_S``, while
  it keeps dying within ``_QUICK_EXIT_S`` of starting). Its streams are recovered, ``interrupted``
  with every journaled frame kept, at once by a reader in another worker (its link to the dead
  one breaks), by the other workers' sweep (its pid is gone: ``holder.py``), or by the new
  worker's start, whichever comes first.
- SIGTERM or SIGINT to the parent: each worker gets one SIGTERM and drains as a single proxy
  does (``shutdown.py``); the parent waits for them (then SIGKILLs any left after the grace and
  a margin) and exits. A worker whose parent is gone drains and exits by itself.
"""

from __future__ import annotations

import logging
import logging.config
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType
from typing import Final

from ..streams.logs import log_config, log_event

__all__ = ["MEMORY_REFUSED", "listening", "supervise", "watch_parent"]

MEMORY_REFUSED: Final = ("--workers needs a journal the worker processes share: "
                         "--store sqlite:///path.db or redis://host:6379/0 (memory:// lives in "
                         "one process)")
_POLL_S: Final = 0.1  # how often the parent looks for a worker that exited
_QUICK_EXIT_S: Final = 10.0  # a worker that dies sooner than this is restarted after a pause
_MAX_PAUSE_S: Final = 30.0
_STOP_MARGIN_S: Final = 10.0  # past the drain's own bound before a worker is SIGKILLed
_PARENT_CHECK_S: Final = 1.0


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class _Worker:
    """One worker slot: the process in it now, and how its last ones fared."""

    def __init__(self, index: int, sockets: list[socket.socket]) -> None:
        self.index = index
        self.sockets = sockets
        self.process: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.pause = 0.0
        self.due = 0.0  # monotonic time before which it is not started again


def listening(host: str, port: int, workers: int,
              worker_ports: int | None) -> list[list[socket.socket]]:
    """The sockets each worker serves: the shared port, then its own (``OSError`` if one
    cannot be bound; none is left open then)."""
    bound: list[socket.socket] = []
    try:
        bound.append(_listen(host, port))
        for i in range(workers if worker_ports else 0):
            assert worker_ports is not None
            bound.append(_listen(host, worker_ports + i))
    except OSError:
        for sock in bound:
            sock.close()
        raise
    shared, own = bound[0], bound[1:]
    return [[shared, *own[i:i + 1]] for i in range(workers)]


def supervise(sockets: list[list[socket.socket]], argv: Sequence[str], *, stop_after: float,
              log_level: str) -> int:
    """Serve with one worker per entry of ``sockets`` (``listening``) until SIGTERM or SIGINT;
    0 once all have stopped."""
    logging.config.dictConfig(log_config(log_level))
    workers = len(sockets)
    slots = [_Worker(i, socks) for i, socks in enumerate(sockets)]
    stopping = threading.Event()

    def on_signal(sig: int, frame: FrameType | None) -> None:
        if not stopping.is_set():
            stopping.set()
            for slot in slots:
                if slot.process is not None and slot.process.poll() is None:
                    slot.process.send_signal(signal.SIGTERM)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    log_event("proxy.workers", workers=workers,
              ports=",".join(str(sock.getsockname()[1]) for sock in slots[0].sockets))
    try:
        while not stopping.is_set():
            now = time.monotonic()
            for slot in slots:
                process = slot.process
                if process is not None and process.poll() is not None:
                    _exited(slot, now)
                    slot.process = None
                if slot.process is None and now >= slot.due and not stopping.is_set():
                    _start(slot, argv)
            stopping.wait(_POLL_S)
        deadline = time.monotonic() + stop_after + _STOP_MARGIN_S
        for slot in slots:
            if slot.process is None:
                continue
            try:
                slot.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log_event("proxy.worker_killed", level=logging.WARNING, worker=slot.index,
                          pid=slot.process.pid)
                slot.process.kill()
                slot.process.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sock in {sock for slot in slots for sock in slot.sockets}:
            sock.close()
    log_event("proxy.workers_stopped", workers=workers)
    return 0


def _start(slot: _Worker, argv: Sequence[str]) -> None:
    fds = [sock.fileno() for sock in slot.sockets]
    command = [sys.executable, "-m", "unbroken.proxy", *argv]
    for fd in fds:
        command += ["--worker-socket", str(fd)]
    slot.process = subprocess.Popen(command, pass_fds=fds)
    slot.started = time.monotonic()
    log_event("proxy.worker_started", worker=slot.index, pid=slot.process.pid)


def _exited(slot: _Worker, now: float) -> None:
    assert slot.process is not None
    quick = now - slot.started < _QUICK_EXIT_S
    slot.pause = min(_MAX_PAUSE_S, max(0.5, slot.pause * 2)) if quick else 0.0
    slot.due = now + slot.pause
    log_event("proxy.worker_exited", level=logging.WARNING, worker=slot.index,
              pid=slot.process.pid, code=slot.process.returncode,
              restart_in_s=round(slot.pause, 3))


def watch_parent() -> None:
    """In a worker: drain and exit (SIGTERM to itself) once the parent is gone, so a parent
    killed outright leaves no worker serving on its own."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_PARENT_CHECK_S)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="unbroken-parent-watch", daemon=True).start()
