"""Run any ASGI app under a real uvicorn server in a thread, on a free port of 127.0.0.1.

    with serve_in_thread(app) as base_url:
        httpx2.get(base_url + "/path")

Modelled on httpx's ``tests/conftest.py`` ``serve_in_thread``. The socket is bound before the
server starts, so the port cannot be taken in between; the server stops when the block ends.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from starlette.types import ASGIApp

__all__ = ["serve_in_thread"]

START_TIMEOUT_S = 10.0


class _ThreadServer(uvicorn.Server):
    def install_signal_handlers(self) -> None:
        # Signals belong to the main thread (pytest's); the server is stopped by should_exit.
        pass


@contextmanager
def serve_in_thread(app: ASGIApp, *, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``app`` until the block ends; yields its base URL, e.g. ``http://127.0.0.1:41234``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_config=None,
        log_level="warning",
        # Long-lived streams (stalls) must not hold the test run at shutdown.
        timeout_graceful_shutdown=1,
    )
    server = _ThreadServer(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.005)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=START_TIMEOUT_S)
        sock.close()
