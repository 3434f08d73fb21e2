"""Replicas on a real ``redis-server``: a follower survives any quiet, and a Redis that goes away
mid-stream ends readers with the proxy's notice (one warning line, no traceback); when it
returns, resumes work.

redis-py 8 gives a connection a 5 s socket timeout unless told otherwise, and a follower's
``XREAD BLOCK`` waits up to ``ORPHAN_CHECK`` (5 s): every follower of a stream quiet for 5 s was
cut, with ``RuntimeError: response already started`` in the log.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx2
import pytest
from tests.integration.test_proxy_support import (
    CALLS,
    KEY,
    FrameReader,
    frames_of,
    free_port,
    message_of,
    proxy_config,
)
from tests.redis_server import redis_server_path
from tests.servers import serve_in_thread

from unbroken.finish import Status
from unbroken.mock import reply_text
from unbroken.proxy import ProxyApp, create_app
from unbroken.proxy.wire import KEEPALIVE_COMMENT
from unbroken.streams.journal import RedisJournal
from unbroken.streams.journal.redis_follow import ORPHAN_CHECK

pytestmark = pytest.mark.integration

AUTH = {"authorization": f"Bearer {KEY}"}


@contextmanager
def replicas(mock: str, url: str, *, orphan_check: float = ORPHAN_CHECK,
             **options: float) -> Iterator[list[tuple[str, ProxyApp]]]:
    """Replicas A and B (uvicorn in threads of this process) sharing one Redis."""
    with ExitStack() as stack:
        started = []
        for _ in "ab":
            journal = RedisJournal(url, orphan_check=orphan_check)
            app = create_app(proxy_config(mock, store=url, **options), journal=journal)
            started.append((stack.enter_context(serve_in_thread(app)), app.state.proxy))
        yield started


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.exc_info]


def test_a_follower_of_a_stream_quiet_for_three_blocks_is_never_cut(
    mock_server: str, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The real default block (5 s) and a model that thinks for 16 s: the follower on B blocks
    # on Redis three times in a row and keeps its connection, sending keep-alives.
    caplog.set_level(logging.WARNING)
    call = CALLS["openai-chat"]
    scenario = "seed=8; tokens=6; stall_after=3; stall_s=16"
    with replicas(mock_server, redis_url, keepalive=2.0) as ((a, _), (b, proxy_b)):
        journal = proxy_b.journal
        assert isinstance(journal, RedisJournal)
        timeout = journal._redis.connection_pool.connection_kwargs["socket_timeout"]
        assert timeout > ORPHAN_CHECK
        with httpx2.stream("POST", a + call.path, json=call.body, timeout=30,
                           headers=call.headers(scenario)) as posted:
            stream_id = posted.headers["unbroken-stream-id"]
            producing = FrameReader(posted, "openai-chat")
            producing.take(1)
            followed = httpx2.get(f"{b}/v1/streams/{stream_id}/events", headers=AUTH,
                                  timeout=httpx2.Timeout(30.0))
            producing.rest()
    assert followed.status_code == 200
    frames = frames_of("openai-chat", followed.content)
    assert [frame.id for frame in frames] == [f"{stream_id}:{n}" for n in range(1, 10)]
    assert message_of("openai-chat", followed.content).text == reply_text(8, 6)
    assert 6 <= followed.content.count(KEEPALIVE_COMMENT) <= 8  # one per 2 s of 16 s
    assert tracebacks(caplog) == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


class RestartableRedis:
    """A ``redis-server`` on a fixed port of 127.0.0.1 with an append-only file, so that it can
    be killed and started again with the same data."""

    def __init__(self, directory: Path) -> None:
        self.program = redis_server_path()
        self.directory = directory
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.program, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "yes", "--appendfsync", "always", "--dir", str(self.directory),
             "--protected-mode", "yes"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)


@pytest.fixture
def restartable(tmp_path: Path) -> Iterator[RestartableRedis]:
    server = RestartableRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()


def test_redis_gone_mid_stream_ends_the_reader_with_the_notice_then_resumes_work(
    mock_server: str, restartable: RestartableRedis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    call = CALLS["openai-chat"]
    scenario = "seed=9; tokens=40; delay_ms=100"
    options = {"keepalive": 0.5, "lease_ttl": 2.0, "lease_renew": 0.5}
    with replicas(mock_server, restartable.url, orphan_check=0.5, **options) as (
            (a, _), (b, _)):
        with httpx2.stream("POST", a + call.path, json=call.body, timeout=30,
                           headers=call.headers(scenario)) as posted:
            stream_id = posted.headers["unbroken-stream-id"]
            FrameReader(posted, "openai-chat").take(1)
            with httpx2.stream("GET", f"{b}/v1/streams/{stream_id}/events", headers=AUTH,
                               timeout=30) as followed:
                reader = FrameReader(followed, "openai-chat")
                head = reader.take(3)
                restartable.kill()
                rest = reader.rest()
        # B's reader: the frames it got, then the proxy's notice (no id), and the body ended.
        read = head + rest
        assert read[-1].block_id is None
        assert '"code":"stream_incomplete"' in read[-1].data
        assert "(the journal is unavailable)" in read[-1].data
        numbered = [frame for frame in read if frame.block_id is not None]
        last_seq = int(numbered[-1].block_id.rpartition(":")[2])
        assert [frame.block_id for frame in numbered] == [
            f"{stream_id}:{n}" for n in range(1, last_seq + 1)]
        warned = [r.getMessage() for r in caplog.records
                  if "stream.read_failed" in r.getMessage() and stream_id in r.getMessage()]
        assert len(warned) == 1, warned
        assert tracebacks(caplog) == []

        restartable.start()
        # A's producer either had its writes retried by redis-py until Redis was back (the
        # stream completes) or lost its journal (A's sweep then ends it interrupted).
        deadline = time.monotonic() + 30
        while True:
            status = httpx2.get(f"{b}/v1/streams/{stream_id}", headers=AUTH, timeout=10)
            if status.status_code == 200 and status.json()["status"] != "streaming":
                break
            assert time.monotonic() < deadline, status.text
            time.sleep(0.1)
        ended = status.json()
        assert ended["status"] in (Status.COMPLETED.value, Status.INTERRUPTED.value)
        # The resume on B reads on from where its notice said, to the end.
        resumed = httpx2.get(f"{b}/v1/streams/{stream_id}/events", timeout=10,
                             headers=AUTH | {"Last-Event-ID": f"{stream_id}:{last_seq}"})
        assert resumed.status_code == 200
        after = frames_of("openai-chat", resumed.content)
        assert [frame.block_id for frame in after] == [
            f"{stream_id}:{n}" for n in range(last_seq + 1, ended["last_seq"] + 1)]
        if ended["status"] == Status.INTERRUPTED.value:
            assert '"code":"proxy_restarted"' in after[-1].data
        else:
            joined = message_of("openai-chat", b"".join(f.raw for f in numbered),
                                resumed.content)
            assert (joined.text, joined.status) == (reply_text(9, 40), Status.COMPLETED)
        # And new streams work again.
        fresh = httpx2.post(b + call.path, json=call.body, timeout=10,
                            headers=call.headers("seed=2; tokens=3"))
        assert message_of("openai-chat", fresh.content).text == reply_text(2, 3)
    assert tracebacks(caplog) == []
