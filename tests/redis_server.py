"""A real ``redis-server`` on a free port of 127.0.0.1, for the Redis journal's tests.

    with running_redis(tmp_dir) as url:   # "redis://127.0.0.1:PORT/0"
        ...

Nothing is persisted (no RDB, no AOF) and the server only listens on 127.0.0.1. Needs the
``redis-server`` program (Debian's ``redis-server`` package): tests are skipped without it unless
``UNBROKEN_REQUIRE_REDIS=1`` (CI), where its absence fails them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["redis_server_path", "running_redis"]

# redis-server answers PING within milliseconds once running; a cold CI machine may still take
# seconds to load the binary. The wait is only a bound.
START_TIMEOUT_S = 60.0


def redis_server_path() -> str:
    """The ``redis-server`` program, or skip (fail when ``UNBROKEN_REQUIRE_REDIS=1``)."""
    found = shutil.which("redis-server")
    if found is None:
        if os.environ.get("UNBROKEN_REQUIRE_REDIS") == "1":
            pytest.fail("UNBROKEN_REQUIRE_REDIS=1 but there is no redis-server "
                        "(apt-get install redis-server)")
        pytest.skip("needs a real Redis: install the redis-server package")
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextmanager
def running_redis(directory: Path) -> Iterator[str]:
    """Start ``redis-server`` in ``directory``; its URL while the block runs, then stop it."""
    program = redis_server_path()
    directory.mkdir(parents=True, exist_ok=True)
    for _attempt in range(3):  # a free port can be taken before the server binds it
        port = _free_port()
        log = directory / f"redis-{port}.log"
        server = subprocess.Popen(
            [program, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
             "--appendonly", "no", "--dir", str(directory), "--logfile", str(log),
             "--protected-mode", "yes"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while server.poll() is None and time.monotonic() < deadline and not _answers(port):
            time.sleep(0.02)
        if server.poll() is None and _answers(port):
            break
        server.kill()
        server.wait(timeout=10)
    else:
        pytest.fail(f"redis-server did not start; its log:\n{log.read_text(errors='replace')}")
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
