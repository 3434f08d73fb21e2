"""``unbroken proxy --workers 2``: real processes on one port, one real SQLite file (or Redis).

Each worker also listens alone on ``--worker-ports BASE + i``, so a test picks the worker that
serves a request: a stream produced by worker 0 and resumed on worker 1 gets the live tail
exactly (while the upstream stalls, then the rest and the end); a killed worker's streams are
recovered by the other, the parent starts it again, and SIGTERM drains every worker;
``--workers`` with the memory journal is refused.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import pytest
from tests.integration.hardening_process import ProxyProcess, log_records
from tests.integration.test_proxy_support import (
    CALLS,
    KEY,
    FrameReader,
    free_port,
    message_of,
    mock_counts,
    stream_status,
)
from tests.redis_server import running_redis

from unbroken.proxy.workers import MEMORY_REFUSED

pytestmark = pytest.mark.integration

AUTH = {"authorization": f"Bearer {KEY}"}
FLAGS = ("--lease-ttl", "60", "--lease-renew", "20", "--keepalive", "0.3",
         "--log-level", "info")
GONE_REASON = ("unbroken proxy: the proxy producing this stream stopped (its process is gone "
               "or its lease expired) before the stream finished")
_UP_S = 60.0  # a bound for a worker to (re)start on a loaded machine


def _two_free_ports() -> int:
    for _ in range(50):
        base = free_port()
        if base < 65000:
            try:
                with socket.create_server(("127.0.0.1", base + 1)):
                    return base
            except OSError:
                continue
    raise AssertionError("no two consecutive free ports")


def _healthy(url: str) -> bool:
    try:
        return httpx2.get(url + "/healthz", timeout=5).status_code == 200
    except httpx2.TransportError:
        return False


def _wait_healthy(url: str) -> None:
    deadline = time.monotonic() + _UP_S
    while not _healthy(url):
        assert time.monotonic() < deadline, f"{url} did not answer"
        time.sleep(0.05)


@contextmanager
def workers(mock: str, store: Path | str, log: Path) -> Iterator[tuple[ProxyProcess, list[str]]]:
    """The proxy with two workers, and each worker's own base URL."""
    base = _two_free_ports()
    with ProxyProcess.start(mock, store, log, *FLAGS, "--workers", "2",
                            "--worker-ports", str(base)) as proxy:
        own = [f"http://127.0.0.1:{base + i}" for i in range(2)]
        for url in own:
            _wait_healthy(url)
        yield proxy, own


def _worker_pids(log: Path) -> dict[int, list[int]]:
    """The pids each worker slot had, in order, from the parent's log."""
    pids: dict[int, list[int]] = {}
    for record in log_records(log):
        if record.get("event") == "proxy.worker_started":
            pids.setdefault(int(record["worker"]), []).append(int(record["pid"]))
    return pids


def _ids(stream_id: str, frames: list[object]) -> list[str]:
    return [frame.id for frame in frames]  # type: ignore[attr-defined]


@contextmanager
def _store(tmp_path: Path, kind: str) -> Iterator[Path | str]:
    if kind == "sqlite":
        yield tmp_path / "journal.db"
        return
    with running_redis(tmp_path / "redis") as url:
        yield url


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_a_stream_produced_by_one_worker_is_followed_live_on_the_other(
    tmp_path: Path, mock_server: str, store: str
) -> None:
    call = CALLS["openai-chat"]
    tokens = 8
    # The upstream stalls after frame 5 for 3 s: worker 1's reader gets frames 3-5 while the
    # stream is live, then the rest as worker 0 commits them, then the end. (That they come
    # by worker 0's notices and not by a re-read of the file: test_sqlite_follow_processes.)
    scenario = f"seed=11; tokens={tokens}; stall_after=5; stall_s=3"
    total = call.total(tokens)
    with _store(tmp_path, store) as where, \
            workers(mock_server, where, tmp_path / "proxy.log") as (_proxy, (one, two)):
        with httpx2.stream("POST", one + call.path, json=call.body, timeout=30,
                           headers=call.headers(scenario)) as produced:
            stream_id = produced.headers["unbroken-stream-id"]
            first = FrameReader(produced, "openai-chat").take(2)
            with httpx2.stream("GET", f"{two}/v1/streams/{stream_id}/events",
                               headers=AUTH | {"Last-Event-ID": f"{stream_id}:2"},
                               timeout=30) as resumed:
                assert resumed.status_code == 200
                reader = FrameReader(resumed, "openai-chat")
                live = reader.take(3)
                assert _ids(stream_id, live) == [f"{stream_id}:{n}" for n in (3, 4, 5)]
                assert stream_status(two, stream_id)["status"] == "streaming"
                rest = reader.rest()
                resumed_body = b"".join(frame.raw for frame in live + rest)
            first_body = b"".join(frame.raw for frame in first)
        assert _ids(stream_id, live + rest) == [f"{stream_id}:{n}"
                                               for n in range(3, total + 1)]
        message = message_of("openai-chat", first_body, resumed_body)
        assert message.text == call.text_after(11, tokens, total)
        assert (message.status, message.last_seq) == ("completed", total)
        status = stream_status(one, stream_id)
        assert (status["status"], status["last_seq"]) == ("completed", total)
    assert mock_counts(mock_server)["generations"] == {call.path: 1}


def test_a_killed_workers_streams_are_recovered_and_the_worker_restarted(
    tmp_path: Path, mock_server: str
) -> None:
    call = CALLS["openai-chat"]
    log = tmp_path / "proxy.log"
    scenario = "seed=6; tokens=8; stall_after=4; stall_s=60"
    with workers(mock_server, tmp_path / "journal.db", log) as (proxy, (one, two)):
        # Two streams on worker 0: one read on worker 1 as it is produced, one no one reads.
        with httpx2.stream("POST", one + call.path, json=call.body, timeout=30,
                           headers=call.headers(scenario)) as unread:
            unread_id = unread.headers["unbroken-stream-id"]
            FrameReader(unread, "openai-chat").take(4)
            with httpx2.stream("POST", one + call.path, json=call.body, timeout=30,
                               headers=call.headers(scenario)) as produced:
                stream_id = produced.headers["unbroken-stream-id"]
                FrameReader(produced, "openai-chat").take(4)
                with httpx2.stream("GET", f"{two}/v1/streams/{stream_id}/events",
                                   headers=AUTH | {"Last-Event-ID": f"{stream_id}:2"},
                                   timeout=30) as resumed:
                    reader = FrameReader(resumed, "openai-chat")
                    live = reader.take(2)
                    pid = _worker_pids(log)[0][0]
                    subprocess.run(["kill", "-KILL", str(pid)], check=True, timeout=10)
                    rest = reader.rest()
        assert _ids(stream_id, live + rest) == [f"{stream_id}:{n}" for n in (3, 4, 5)]
        error = json.loads(rest[-1].data)["error"]
        assert (error["code"], error["message"]) == ("proxy_restarted", GONE_REASON)
        status = stream_status(two, stream_id)
        assert (status["status"], status["last_seq"]) == ("interrupted", 5)
        # The parent starts worker 0 again; the stream no one read is recovered too (by the
        # new worker's start or the other's sweep), every journaled frame kept.
        deadline = time.monotonic() + _UP_S
        while len(_worker_pids(log).get(0, [])) < 2 or not _healthy(one):
            assert time.monotonic() < deadline, "worker 0 was not started again"
            time.sleep(0.05)
        assert _worker_pids(log)[0][1] != pid
        exited = [r for r in log_records(log) if r.get("event") == "proxy.worker_exited"]
        assert [(r["worker"], r["pid"], r["code"]) for r in exited] == [("0", str(pid), "-9")]
        unread_status = stream_status(one, unread_id)
        assert (unread_status["status"], unread_status["last_seq"]) == ("interrupted", 5)
        # SIGTERM to the parent: each live worker drains, then the parent exits 0.
        assert proxy.terminate() == 0
        events = [r.get("event") for r in log_records(log)]
        assert (events.count("proxy.drained"), events[-1]) == (2, "proxy.workers_stopped")
    assert mock_counts(mock_server)["generations"] == {call.path: 2}


def test_workers_with_the_memory_journal_are_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "unbroken.proxy", "--port", str(free_port()), "--store",
         "memory://", "--workers", "2"],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().endswith(f"error: {MEMORY_REFUSED}")
