"""A downstream reader that stops reading never grows the proxy's memory: it reads from the
journal by cursor, so while it sits still the generation goes on into SQLite, and the proxy holds
at most one batch for it. Proved with ``tracemalloc``: what the proxy holds once the whole
generation is journaled, its reader still stalled, is a fraction of the body's size."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from tests.integration.test_proxy_support import (
    CALLS,
    KEY,
    free_port,
    message_of,
    running_proxy,
)

from unbroken.mock import reply_text

pytestmark = pytest.mark.integration

TOKENS = 6000  # about 1.9 MB of SSE downstream
# Bytes of Python memory the proxy may still hold more than before the stream, once the whole
# generation is journaled and its reader has not read it: one storage batch (512 frames) for the
# reader and the transport's high-water mark, whatever the body's size. (The peak is not the
# measure: a producer's per-turn burst is transient and the same with or without readers.)
BOUND = 400_000


def _request(port: int, call_path: str, body: bytes, scenario: str) -> bytes:
    return (
        f"POST {call_path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
        f"Unbroken-Mock: {scenario}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


def _wait_completed(proxy: str, stream_id: str) -> None:
    deadline = time.monotonic() + 60
    while httpx2.get(f"{proxy}/v1/streams/{stream_id}",
                     headers={"authorization": f"Bearer {KEY}"}).json()["status"] != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.1)


@pytest.fixture
def mock_process() -> Iterator[str]:
    """The mock in its own process, so that the traced memory is the proxy's alone."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "unbroken.mock", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60  # a bound for a cold, loaded CI machine
        while True:
            try:
                httpx2.get(base_url + "/_mock/requests", timeout=1)
                break
            except httpx2.TransportError:
                assert time.monotonic() < deadline, "the mock did not start"
                time.sleep(0.05)
        yield base_url
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_a_reader_that_stops_reading_does_not_grow_proxy_memory(
    tmp_path: Path, mock_process: str
) -> None:
    mock_server = mock_process
    call = CALLS["openai-chat"]
    body = json.dumps(call.body).encode()
    scenario = f"seed=61; tokens={TOKENS}"
    tracemalloc.start()
    try:
        with running_proxy(mock_server, store=f"sqlite:///{tmp_path / 'journal.db'}") as (
            proxy, _app
        ):
            port = int(proxy.rsplit(":", 1)[1])
            warm = httpx2.post(proxy + call.path, json=call.body, headers=call.headers(
                "tokens=50"), timeout=30)
            assert message_of("openai-chat", warm.content).text == reply_text(0, 50)
            sock = socket.socket()
            # A small receive window: the proxy's writes back up into its own buffers at once.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(30)
            with sock:
                sock.connect(("127.0.0.1", port))
                tracemalloc.reset_peak()
                baseline = tracemalloc.get_traced_memory()[0]
                sock.sendall(_request(port, call.path, body, scenario))
                received = sock.recv(4096)
                while b"\r\n\r\n" not in received:
                    received += sock.recv(4096)
                head = received.split(b"\r\n\r\n", 1)[0].decode()
                stream_id = next(line.split(":", 1)[1].strip() for line in head.split("\r\n")
                                 if line.lower().startswith("unbroken-stream-id:"))
                # The reader sits still while the whole generation is journaled.
                _wait_completed(proxy, stream_id)
                held = tracemalloc.get_traced_memory()[0] - baseline
                chunks = [received]
                while chunk := sock.recv(65536):
                    chunks.append(chunk)
        raw = b"".join(chunks)
    finally:
        tracemalloc.stop()
    payload = raw.split(b"\r\n\r\n", 1)[1]
    decoded = _dechunk(payload)
    assert len(decoded) > 1_800_000
    assert message_of("openai-chat", decoded).text == reply_text(61, TOKENS)
    assert held < BOUND, f"the proxy holds {held} more bytes for a {len(decoded)} byte body"


def _dechunk(data: bytes) -> bytes:
    """The body of an HTTP/1.1 chunked transfer encoding."""
    out: list[bytes] = []
    position = 0
    while True:
        end = data.index(b"\r\n", position)
        size = int(data[position:end].split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(data[end + 2 : end + 2 + size])
        position = end + 2 + size + 2
