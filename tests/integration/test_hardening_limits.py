"""Every limit answers with its status and a one-line message, before any upstream request:
``--max-body`` 413, ``--max-streams-per-key`` 429, ``--max-streams`` 503 with Retry-After; an
upstream frame over ``max_event_size`` ends the stream ``failed`` with an error frame;
``--idle-close`` closes idle keep-alive connections."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx2
import openai
import pytest
from tests.integration.hardening_process import ProxyProcess
from tests.integration.test_proxy_support import (
    CALLS,
    frames_of,
    message_of,
    mock_counts,
    running_proxy,
    stream_status,
)

from unbroken.finish import Status
from unbroken.mock import reply_text

pytestmark = pytest.mark.integration

FLAGS = ("--max-body", "2k", "--max-streams-per-key", "2", "--max-streams", "3",
         "--idle-close", "1", "--log-level", "warning")
KEYS = ("sk-limit-a", "sk-limit-b", "sk-limit-c")
STALLED = "tokens=4; stall_after=2; stall_s=30"


@pytest.fixture(scope="module")
def proxy(mock_server_session: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory = Path(tmp_path_factory.mktemp("limits"))
    with ProxyProcess.start(mock_server_session, directory / "journal.db",
                            directory / "proxy.log", *FLAGS) as process:
        yield process.base_url


def _headers(key: str, scenario: str = "tokens=3") -> dict[str, str]:
    return {"authorization": f"Bearer {key}", "Unbroken-Mock": scenario}


def _one_line(response: httpx2.Response) -> str:
    message: str = response.json()["error"]["message"]
    assert "\n" not in message
    return message


def test_a_body_over_max_body_is_413(proxy: str, mock_server: str) -> None:
    call = CALLS["openai-chat"]
    body = dict(call.body, user="x" * 3000)
    declared = httpx2.post(proxy + call.path, json=body, headers=_headers(KEYS[0]))
    assert declared.status_code == 413
    assert _one_line(declared) == ("unbroken proxy: the request body is over --max-body "
                                   "(2048 bytes)")

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"model": "m", "stream": true, "user": "'
        yield b"y" * 3000
        yield b'"}'

    chunked = httpx2.post(proxy + "/v1/messages", content=chunks(),
                          headers={"x-api-key": KEYS[0], "content-type": "application/json"})
    assert chunked.status_code == 413
    assert chunked.json()["type"] == "error"  # Anthropic's error shape
    assert mock_counts(mock_server).get("generations", {}) == {}


def test_stream_limits_per_key_429_and_total_503(proxy: str, mock_server: str) -> None:
    call = CALLS["openai-chat"]
    live: list[str] = []
    with ExitStack() as stack:
        for key in (KEYS[0], KEYS[0], KEYS[1]):
            response = stack.enter_context(httpx2.stream(
                "POST", proxy + call.path, json=call.body, headers=_headers(key, STALLED),
                timeout=10))
            assert response.status_code == 200
            live.append(response.headers["unbroken-stream-id"])
        # A third stream for key A: 429, through the official SDK.
        with openai.OpenAI(base_url=proxy + "/v1", api_key=KEYS[0], max_retries=0) as client, \
                pytest.raises(openai.RateLimitError) as limited:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                           stream=True)
        assert limited.value.status_code == 429
        assert limited.value.response.headers["retry-after"] == "1"
        assert "unbroken proxy: this credential has 2 live streams (--max-streams-per-key)" \
            in str(limited.value)
        # Key C has no stream, but the proxy is full: 503 with Retry-After.
        full = httpx2.post(proxy + call.path, json=call.body, headers=_headers(KEYS[2]))
        assert (full.status_code, full.headers["retry-after"]) == (503, "1")
        assert _one_line(full) == ("unbroken proxy: 3 streams are live (--max-streams); "
                                   "retry later")
        assert mock_counts(mock_server)["generations"] == {"/v1/chat/completions": 3}
        for stream_id in live:
            cancelled = httpx2.post(f"{proxy}/v1/streams/{stream_id}/cancel",
                                    headers=_headers(KEYS[0] if stream_id != live[2]
                                                     else KEYS[1]))
            assert cancelled.json()["status"] == "cancelled"
    # Slots come back when streams end: key A streams again.
    again = httpx2.post(proxy + call.path, json=call.body, headers=_headers(KEYS[0]))
    assert again.status_code == 200
    assert message_of("openai-chat", again.content).text == reply_text(0, 3)
    metrics = httpx2.get(proxy + "/metrics").text
    assert 'unbroken_refusals_total{status="429"} 1' in metrics.splitlines()
    assert 'unbroken_refusals_total{status="503"} 1' in metrics.splitlines()
    assert "unbroken_active_streams 0" in metrics.splitlines()


def test_idle_keep_alive_connections_are_closed(proxy: str) -> None:
    with socket.create_connection(("127.0.0.1", int(proxy.rsplit(":", 1)[1])), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: proxy\r\n\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(4096)
            assert chunk, "closed before the answer"
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 ")
        # Nothing more is sent: the server closes the idle connection (EOF) after --idle-close
        # seconds; the 10 s socket timeout would raise instead if it never did.
        assert sock.recv(4096) == b""


def test_an_upstream_frame_over_max_event_size_fails_the_stream(mock_server: str) -> None:
    call = CALLS["openai-responses"]
    # Responses frames of 30 tokens: deltas ~230 bytes, output_text.done (frame 35) ~700.
    with running_proxy(mock_server, max_event_size=600) as (proxy, _app):
        response = httpx2.post(proxy + call.path, json=call.body,
                               headers=call.headers("seed=5; tokens=30"), timeout=10)
        stream_id = response.headers["unbroken-stream-id"]
        events = frames_of("openai-responses", response.content)
        assert [e.id for e in events] == [f"{stream_id}:{n}" for n in range(1, 36)]
        assert events[-1].event == "error"
        assert '"code":"upstream_malformed"' in events[-1].data
        assert "EventTooLargeError" in events[-1].data or "600" in events[-1].data
        message = message_of("openai-responses", response.content)
        assert (message.status, message.text) == (Status.FAILED, reply_text(5, 30))
        status = stream_status(proxy, stream_id)
        assert (status["status"], status["last_seq"], status["error"]["type"]) == (
            "failed", 35, "EventTooLargeError")


def test_a_draining_proxy_refuses_new_streams_with_503(mock_server: str) -> None:
    call = CALLS["anthropic"]
    with running_proxy(mock_server, shutdown_grace=0.0) as (proxy, app):
        app.begin_drain_threadsafe()  # what SIGTERM does, without stopping the server
        deadline = time.monotonic() + 10
        while httpx2.get(proxy + "/healthz").status_code != 503:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert httpx2.get(proxy + "/healthz").json() == {"status": "draining"}
        refused = httpx2.post(proxy + call.path, json=call.body, headers=call.headers("tokens=3"))
        assert (refused.status_code, refused.headers["retry-after"]) == (503, "1")
        assert refused.json() == {"type": "error", "error": {
            "type": "api_error",
            "message": "unbroken proxy: shutting down; retry on another instance"}}
    assert mock_counts(mock_server).get("generations", {}) == {}
