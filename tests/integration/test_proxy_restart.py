"""The proxy as a real process (``python -m unbroken.proxy``), restarted on the same SQLite file:
old streams are still served, exactly, with no new generation."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from tests.integration.test_proxy_support import (
    CALLS,
    KEY,
    frames_of,
    free_port,
    message_of,
    mock_counts,
    read_some,
    stream_status,
)

from unbroken.mock import reply_text

pytestmark = pytest.mark.integration

AUTH = {"authorization": f"Bearer {KEY}"}


@contextmanager
def proxy_process(mock: str, store: Path) -> Iterator[str]:
    port = free_port()
    command = [
        sys.executable, "-m", "unbroken.proxy", "--host", "127.0.0.1", "--port", str(port),
        "--upstream", mock, "--store", f"sqlite:///{store}", "--log-level", "warning",
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base_url = f"http://127.0.0.1:{port}"
    try:
        # Only a bound: a cold, loaded CI machine may import the proxy for many seconds.
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            try:
                if httpx2.get(base_url + "/healthz", timeout=5).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            assert time.monotonic() < deadline, "the proxy did not start"
            time.sleep(0.05)
        yield base_url
    finally:
        process.terminate()  # SIGTERM: uvicorn's graceful shutdown runs the lifespan's end
        try:
            process.wait(timeout=15)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            if process.stderr is not None:
                process.stderr.close()


def test_restarted_proxy_serves_old_streams(tmp_path: Path, mock_server: str) -> None:
    store = tmp_path / "journal.db"
    finished: dict[str, str] = {}
    bodies: dict[str, bytes] = {}
    with proxy_process(mock_server, store) as proxy:
        for dialect in ("openai-chat", "anthropic", "gemini", "ollama"):
            call = CALLS[dialect]
            created = httpx2.post(proxy + call.path, json=call.body,
                                  headers=call.headers("seed=4; tokens=9"), timeout=10)
            assert created.status_code == 200
            finished[dialect] = created.headers["unbroken-stream-id"]
            bodies[dialect] = created.content
        # A stream still live when the first process stops.
        call = CALLS["openai-responses"]
        with httpx2.stream("POST", proxy + call.path, json=call.body, timeout=10,
                           headers=call.headers("seed=4; tokens=9; stall_after=6")) as response:
            live = response.headers["unbroken-stream-id"]
            read_some(response, "openai-responses", 6)
    before = mock_counts(mock_server)

    with proxy_process(mock_server, store) as proxy:
        for dialect, stream_id in finished.items():
            status = stream_status(proxy, stream_id)
            assert (status["status"], status["text"]) == ("completed", reply_text(4, 9))
            assert status["last_seq"] == CALLS[dialect].total(9)
            events = httpx2.get(f"{proxy}/v1/streams/{stream_id}/events", headers=AUTH)
            assert message_of(dialect, events.content).text == reply_text(4, 9)
            # The same POST resumed on the new process: exactly what the old one sent after 3.
            call = CALLS[dialect]
            resumed = httpx2.post(
                proxy + call.path, json=call.body,
                headers=call.headers("seed=4; tokens=9") | {"Last-Event-ID": f"{stream_id}:3"},
            )
            assert [_key(f) for f in frames_of(dialect, resumed.content)] == [
                _key(f) for f in frames_of(dialect, bodies[dialect])[3:]
            ]
        # The live stream ended with the first process: interrupted, prefix kept, and its
        # readers get the dialect's error frame last.
        status = stream_status(proxy, live)
        assert status["status"] == "interrupted"
        assert status["last_seq"] == 7
        assert status["text"] == CALLS["openai-responses"].text_after(4, 9, 6)
        last = frames_of("openai-responses", httpx2.get(
            f"{proxy}/v1/streams/{live}/events?after=6", headers=AUTH).content)
        assert [(e.event, e.id) for e in last] == [("error", f"{live}:7")]
        assert '"code":"proxy_shutdown"' in last[0].data
    assert mock_counts(mock_server) == before


def _key(frame: Any) -> tuple[Any, ...]:
    """What a frame says: its event, data and id (SSE), or its line (NDJSON)."""
    if hasattr(frame, "event"):
        return frame.event, frame.data, frame.id
    return (frame.raw,)
