"""Run ASGI apps under real uvicorn servers in background threads, on free loopback ports."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

__all__ = ["serve_in_thread"]

START_TIMEOUT_S = 60.0  # a bound, not a wait: a cold machine may take seconds to start uvicorn


class _ThreadServer(uvicorn.Server):
    def install_signal_handlers(self) -> None:
        # Signals belong to the main thread; the server stops through should_exit.
        pass


@contextmanager
def serve_in_thread(app: Any, *, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve ``app`` until the block ends; yields its base URL, e.g. ``http://127.0.0.1:41234``.

    The socket is bound before the server starts, so the port cannot be taken in between.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    # Long-lived streams (stalls) must not hold the shutdown for long.
    config = uvicorn.Config(app, log_config=None, log_level="warning",
                            timeout_graceful_shutdown=1)
    server = _ThreadServer(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.005)
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(timeout=START_TIMEOUT_S)
        sock.close()
