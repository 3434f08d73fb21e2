"""``unbroken.server`` apps as real processes: SIGKILL mid-stream and a restart on the same
SQLite file; two app processes on one real Redis or one SQLite file (resume on the other
follows the live tail, cancel from the other stops the producer, one producer for one
idempotency key)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from tests.integration.test_proxy_support import free_port
from tests.integration.test_server_streams import end_of, ids, read_events, values
from tests.redis_server import running_redis

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def app_process(store: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.server_app", "--port", str(port),
         "--store", store, "--lease-ttl", "2"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60  # only a bound: a loaded machine imports slowly
        while True:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            try:
                if httpx2.get(url + "/healthz", timeout=5).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            assert time.monotonic() < deadline, "the app did not start"
            time.sleep(0.05)
        yield url, process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        if process.stderr is not None:
            process.stderr.close()


def start(url: str, **query: Any) -> dict[str, Any]:
    response = httpx2.post(url + "/start", params={"owner": "alice", **query}, timeout=10)
    assert response.status_code == 200, response.text
    started: dict[str, Any] = response.json()
    return started


def status_of(url: str, stream_id: str) -> dict[str, Any]:
    got = httpx2.get(f"{url}/streams/{stream_id}", headers={"x-owner": "alice"}, timeout=10)
    assert got.status_code == 200, got.text
    found: dict[str, Any] = got.json()
    return found


def test_sigkill_mid_stream_then_restart_resumes_to_interrupted(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'app.db'}"
    with app_process(store) as (first, process):
        stream_id = start(first, kind="str", n=10_000, interval=0.01)["stream_id"]
        _status, seen = read_events(first, stream_id, limit=5)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    with app_process(store) as (second, _process):
        _status, rest = read_events(second, stream_id, headers={"last-event-id": seen[-1].id})
        _status, whole = read_events(second, stream_id)
    assert values(seen + rest) == values(whole)
    assert ids(whole) == list(range(1, len(whole) + 1))
    assert len(whole) > 5  # every frame journaled before the kill, then the end
    assert end_of(whole) == {
        "status": "interrupted", "finish_reason": None, "raw_finish_reason": None,
        "error": {"type": "producer_lost",
                  "message": "the process producing this stream stopped before the stream "
                             "ended"}}
    assert [json.loads(event.data) for event in whole[:-1]] == [
        f"t{i}\r\n✓ " for i in range(1, len(whole))]


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    with running_redis(tmp_path / "redis") as url:
        yield url


@pytest.fixture(params=["redis", "sqlite"])
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A journal two processes share: a real Redis, or one SQLite file (same host)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'shared.db'}"
    url: str = request.getfixturevalue("redis_url")
    return url


def test_two_processes_on_one_journal_resume_follows_the_live_tail(shared_store: str) -> None:
    with app_process(shared_store) as (a, _pa), app_process(shared_store) as (b, _pb):
        stream_id = start(a, kind="str", n=60, interval=0.05)["stream_id"]
        _status, first = read_events(a, stream_id, limit=3)
        assert status_of(b, stream_id)["status"] == "streaming"  # still live when B reads
        _status, rest = read_events(b, stream_id, headers={"last-event-id": first[-1].id})
        _status, whole = read_events(a, stream_id)
    assert values(first + rest) == values(whole)
    assert ids(whole) == list(range(1, 62))
    assert end_of(whole)["status"] == "completed"


def test_cancel_from_another_replica_stops_the_producer(shared_store: str) -> None:
    with app_process(shared_store) as (a, _pa), app_process(shared_store) as (b, _pb):
        before = httpx2.get(a + "/runs", timeout=10).json()
        stream_id = start(a, kind="str", n=10_000, interval=0.02)["stream_id"]
        read_events(a, stream_id, limit=3)
        cancelled = httpx2.post(f"{b}/streams/{stream_id}/cancel",
                                headers={"x-owner": "alice"}, timeout=30)
        assert cancelled.status_code == 200
        assert cancelled.json()["status"] == "cancelled"
        after = httpx2.get(a + "/runs", timeout=10).json()
        assert after.get("closed", 0) == before.get("closed", 0) + 1  # A's source stopped
        last_seq = cancelled.json()["last_seq"]
        time.sleep(0.3)
        assert status_of(a, stream_id)["last_seq"] == last_seq  # nothing after the end
        _status, whole = read_events(b, stream_id)
    assert ids(whole) == list(range(1, last_seq + 1))
    assert end_of(whole)["status"] == "cancelled"


def test_one_idempotency_key_on_two_replicas_runs_one_producer(shared_store: str) -> None:
    with app_process(shared_store) as (a, _pa), app_process(shared_store) as (b, _pb):
        answers: list[dict[str, Any]] = []

        def start_on(url: str) -> None:
            answers.append(start(url, kind="str", n=20, interval=0.02, key="retry-7"))

        threads = [threading.Thread(target=start_on, args=(url,)) for url in (a, b, a, b)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert len(answers) == 4
        assert len({answer["stream_id"] for answer in answers}) == 1
        assert [answer["created"] for answer in answers].count(True) == 1
        runs = [httpx2.get(url + "/runs", timeout=10).json().get("started", 0)
                for url in (a, b)]
        assert sum(runs) == 1
        _status, whole = read_events(b, answers[0]["stream_id"])
    assert ids(whole) == list(range(1, 22))
