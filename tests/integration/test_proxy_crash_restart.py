"""A proxy SIGKILLed and restarted on the same SQLite file costs a pause, never a generation.

Real processes (``python -m unbroken.proxy``), a real SQLite file, the mock (or a socket that
never answers) upstream:

- write-ahead: a stream is journaled before its upstream request leaves, so a crash while the
  provider has not answered leaves a record; the restart ends it ``interrupted`` with the
  reason, ``GET /v1/streams`` lists it and its ``Idempotency-Key`` attaches to it (no second
  upstream request);
- recovery at once: the dead process's streams are settled when the new one starts (its pid
  is gone), not one lease later; a resume gets its frames and the end at once;
- sibling processes on one file: a resume on B of a stream A produces gets the frames A
  journaled, then A's live tail (keep-alives while A's upstream stalls), and the end as soon
  as A dies.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from tests.integration.hardening_process import ProxyProcess, log_records
from tests.integration.test_proxy_support import CALLS, KEY, FrameReader, frames_of, mock_counts

pytestmark = pytest.mark.integration

AUTH = {"authorization": f"Bearer {KEY}"}
# A lease far longer than any wait here: whatever ends a stream early is the holder check.
FLAGS = ("--lease-ttl", "60", "--lease-renew", "20", "--keepalive", "0.3",
         "--log-level", "info")
PENDING_REASON = ("unbroken proxy: the proxy stopped before the provider answered this "
                  "stream's request; the generation may have run and been billed")
GONE_REASON = ("unbroken proxy: the proxy producing this stream stopped (its process is gone "
               "or its lease expired) before the stream finished")


class SilentUpstream:
    """A TCP server on 127.0.0.1 that accepts connections, reads, and never answers: a
    provider still thinking about the first token. Counts the connections it accepted."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self.accepted = 0
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            self._held.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in self._held:
            conn.close()
        self._server.close()


@pytest.fixture
def silent() -> Iterator[SilentUpstream]:
    upstream = SilentUpstream()
    try:
        yield upstream
    finally:
        upstream.close()


def listed(proxy: ProxyProcess) -> list[dict[str, object]]:
    response = httpx2.get(proxy.base_url + "/v1/streams", headers=AUTH, timeout=10)
    assert response.status_code == 200, response.text
    streams: list[dict[str, object]] = response.json()["streams"]
    return streams


def post_in_background(url: str, headers: dict[str, str]) -> threading.Thread:
    """POST that will be cut by the kill; its outcome does not matter."""
    call = CALLS["openai-chat"]

    def post() -> None:
        try:
            httpx2.post(url + call.path, json=call.body, headers=headers, timeout=30)
        except httpx2.HTTPError:
            pass

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    return thread


def test_a_crash_before_the_provider_answered_leaves_a_record_the_key_finds(
    tmp_path: Path, silent: SilentUpstream
) -> None:
    store = tmp_path / "journal.db"
    call = CALLS["openai-chat"]
    headers = call.headers("seed=1") | {"Idempotency-Key": "order-17"}
    with ProxyProcess.start(silent.url, store, tmp_path / "a.log", *FLAGS) as first:
        posting = post_in_background(first.base_url, headers)
        deadline = time.monotonic() + 20
        while not (streams := listed(first)):  # journaled before the request left
            assert time.monotonic() < deadline, "no record while the provider thinks"
            time.sleep(0.02)
        assert [stream["status"] for stream in streams] == ["pending"]
        stream_id = streams[0]["id"]
        deadline = time.monotonic() + 20
        while silent.accepted < 1:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        first.kill()
    posting.join(timeout=30)
    assert silent.accepted == 1

    with ProxyProcess.start(silent.url, store, tmp_path / "b.log", *FLAGS) as second:
        # Settled as the process started: its holder's pid is gone.
        status = httpx2.get(f"{second.base_url}/v1/streams/{stream_id}", headers=AUTH,
                            timeout=10).json()
        assert (status["status"], status["last_seq"], status["text"]) == ("interrupted", 1, "")
        assert status["error"] == {"type": "proxy_restarted", "message": PENDING_REASON}
        assert [(s["id"], s["status"]) for s in listed(second)] == [(stream_id, "interrupted")]
        # The client's retry with its key attaches to that record: no second generation.
        again = httpx2.post(second.base_url + call.path, json=call.body, headers=headers,
                            timeout=10)
        assert again.status_code == 200
        assert again.headers["idempotent-replayed"] == "true"
        assert again.headers["unbroken-stream-id"] == stream_id
        frames = frames_of("openai-chat", again.content)
        assert [frame.id for frame in frames] == [f"{stream_id}:1"]
        error = json.loads(frames[0].data)["error"]
        assert (error["code"], error["message"]) == ("proxy_restarted", PENDING_REASON)
        recovered = [r for r in log_records(second.log) if r.get("event") == "stream.recovered"]
        assert [(r["stream_id"], r["was"], r["status"]) for r in recovered] == [
            (stream_id, "pending", "interrupted")]
    assert silent.accepted == 1


def test_a_refused_request_leaves_no_record(tmp_path: Path, mock_server: str) -> None:
    # Write-ahead, undone: the upstream answered 429, so nothing was generated; the record
    # goes with the key, and the same key may start the stream afterwards.
    call = CALLS["openai-chat"]
    key = {"Idempotency-Key": "k-429"}
    with ProxyProcess.start(mock_server, tmp_path / "j.db", tmp_path / "a.log",
                            *FLAGS) as proxy:
        refused = httpx2.post(proxy.base_url + call.path, json=call.body, timeout=10,
                              headers=call.headers("status=429") | key)
        assert refused.status_code == 429
        assert listed(proxy) == []
        created = httpx2.post(proxy.base_url + call.path, json=call.body, timeout=10,
                              headers=call.headers("seed=2; tokens=3") | key)
        assert created.status_code == 200
        assert "idempotent-replayed" not in created.headers
        assert [s["status"] for s in listed(proxy)] == ["completed"]


def test_a_restart_settles_the_dead_processs_streams_at_once(
    tmp_path: Path, mock_server: str
) -> None:
    store = tmp_path / "journal.db"
    call = CALLS["anthropic"]
    scenario = "seed=5; tokens=8; stall_after=5; stall_s=60"
    with ProxyProcess.start(mock_server, store, tmp_path / "a.log", *FLAGS) as first:
        with httpx2.stream("POST", first.base_url + call.path, json=call.body, timeout=20,
                           headers=call.headers(scenario)) as response:
            stream_id = response.headers["unbroken-stream-id"]
            FrameReader(response, "anthropic").take(5)
            first.kill()
    before = mock_counts(mock_server)
    # The lease has ~60 s to run; the new process settles the stream anyway (its holder's
    # pid is gone), before it answers /healthz.
    with ProxyProcess.start(mock_server, store, tmp_path / "b.log", *FLAGS) as second:
        status = httpx2.get(f"{second.base_url}/v1/streams/{stream_id}", headers=AUTH,
                            timeout=10).json()
        assert (status["status"], status["last_seq"]) == ("interrupted", 6)
        assert status["error"] == {"type": "proxy_restarted", "message": GONE_REASON}
        resumed = httpx2.post(second.base_url + call.path, json=call.body, timeout=10,
                              headers=call.headers(scenario) | {"Last-Event-ID":
                                                                f"{stream_id}:5"})
        frames = frames_of("anthropic", resumed.content)
        assert [(frame.event, frame.id) for frame in frames] == [("error", f"{stream_id}:6")]
    assert mock_counts(mock_server) == before


def test_a_sibling_processes_resume_follows_the_live_tail_and_gets_the_end_when_it_dies(
    tmp_path: Path, mock_server: str
) -> None:
    store = tmp_path / "journal.db"
    call = CALLS["openai-chat"]
    scenario = "seed=6; tokens=8; stall_after=4; stall_s=60"
    with ProxyProcess.start(mock_server, store, tmp_path / "a.log", *FLAGS) as a, \
            ProxyProcess.start(mock_server, store, tmp_path / "b.log", *FLAGS) as b:
        with httpx2.stream("POST", a.base_url + call.path, json=call.body, timeout=20,
                           headers=call.headers(scenario)) as response:
            stream_id = response.headers["unbroken-stream-id"]
            FrameReader(response, "openai-chat").take(4)
            # B follows A's live stream (A's commit notices): frames 3 and 4, then
            # keep-alives while A's upstream stalls.
            with httpx2.stream("GET", f"{b.base_url}/v1/streams/{stream_id}/events",
                               headers=AUTH | {"Last-Event-ID": f"{stream_id}:2"},
                               timeout=20) as events:
                assert events.status_code == 200
                chunks = events.iter_raw()
                waited = b""
                while waited.count(b": keep-alive\n") < 3:
                    waited += next(chunks)
                assert waited.endswith(b": keep-alive\n" * 3)
                a.kill()
                rest = waited.replace(b": keep-alive\n", b"") + b"".join(chunks)
    frames = frames_of("openai-chat", rest)
    assert [frame.id for frame in frames] == [f"{stream_id}:{n}" for n in (3, 4, 5)]
    error = json.loads(frames[-1].data)["error"]
    assert (error["code"], error["message"]) == ("proxy_restarted", GONE_REASON)
