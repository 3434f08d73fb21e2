import socket
from collections.abc import Iterator

import pytest
from tests.redis_server import running_redis


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio (anyio's pytest plugin; see ``@pytest.mark.anyio``)."""
    return "asyncio"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One real redis-server for the session (see ``tests/redis_server.py``)."""
    with running_redis(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture
def redis_url(redis_server: str) -> str:
    """The session's Redis, emptied for this test."""
    with socket.create_connection(_address(redis_server), timeout=30) as sock:
        sock.sendall(b"FLUSHALL\r\n")
        answer = b""
        while not answer.endswith(b"\r\n"):  # one recv may return part of the line
            chunk = sock.recv(16)
            assert chunk, f"redis closed the connection after {answer!r}"
            answer += chunk
        assert answer == b"+OK\r\n"
    return redis_server


def _address(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("redis://").partition("/")[0].partition(":")
    return host, int(port)
