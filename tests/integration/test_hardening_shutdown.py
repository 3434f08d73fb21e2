"""SIGTERM drains: the proxy process stops accepting, lets live streams finish within
``--shutdown-grace``, then ends the rest ``interrupted`` with their error frame, and exits."""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx2
import pytest
from tests.integration.hardening_process import ProxyProcess, log_records
from tests.integration.test_proxy_support import (
    CALLS,
    frames_of,
    message_of,
    mock_counts,
    stream_status,
)

from unbroken.errors import ProxyInterrupted
from unbroken.finish import Status
from unbroken.mock import reply_text

pytestmark = pytest.mark.integration

# The quick streams (8 tokens 250 ms apart, ~2.3 s) must still be live when SIGTERM comes, a few
# ms after they start, and end within the grace: seconds of slack both ways for a slow machine.
GRACE = 6


def _wait_for_log(log: Path, event: str) -> None:
    deadline = time.monotonic() + 30
    while not any(r.get("event") == event for r in log_records(log)):
        assert time.monotonic() < deadline, f"no {event} in the log"
        time.sleep(0.02)


def _read_all(url: str, call_path: str, body: object, headers: dict[str, str],
              started: threading.Event, ids: list[str]) -> bytes:
    """The whole body of a stream; ``started`` is set once its headers arrived."""
    with httpx2.stream("POST", url + call_path, json=body, headers=headers,
                       timeout=30) as response:
        assert response.status_code == 200
        ids.append(response.headers["unbroken-stream-id"])
        started.set()
        return b"".join(response.iter_raw())


def test_sigterm_lets_live_streams_finish_within_the_grace_then_interrupts_the_rest(
    tmp_path: Path, mock_server: str
) -> None:
    store, log = tmp_path / "journal.db", tmp_path / "proxy.log"
    flags = ("--shutdown-grace", str(GRACE), "--log-level", "info")
    chat, anthropic, ollama = CALLS["openai-chat"], CALLS["anthropic"], CALLS["ollama"]
    quick = "seed=31; tokens=8; delay_ms=250"  # ~2.3 s: live at SIGTERM, ends within the grace
    stuck = "seed=32; tokens=8; stall_after=5; stall_s=30"  # would run 30 s
    proxy = ProxyProcess.start(mock_server, store, log, *flags)
    with proxy, ThreadPoolExecutor(max_workers=2) as pool:
        started = [threading.Event(), threading.Event()]
        ids: list[list[str]] = [[], []]
        finishing: Future[bytes] = pool.submit(
            _read_all, proxy.base_url, chat.path, chat.body, chat.headers(quick), started[0],
            ids[0])
        stalled: Future[bytes] = pool.submit(
            _read_all, proxy.base_url, anthropic.path, anthropic.body,
            anthropic.headers(stuck), started[1], ids[1])
        # A stream nobody reads any more: its generation goes on and must finish too.
        with httpx2.stream("POST", proxy.base_url + ollama.path, json=ollama.body,
                           headers=ollama.headers(quick.replace("31", "33")),
                           timeout=10) as unread:
            unread_id = unread.headers["unbroken-stream-id"]
        assert started[0].wait(30) and started[1].wait(30)

        proxy.process.send_signal(signal.SIGTERM)
        _wait_for_log(log, "proxy.draining")
        # No new stream while draining: the listener is closed, or the proxy answers 503 (and
        # so does /healthz, for a load balancer). A connection that reached the kernel's backlog
        # just before uvicorn closed the listener is reset instead (ReadError) or closed unanswered;
        # the generation counts at the end prove no late stream started either way.
        try:
            health = httpx2.get(proxy.base_url + "/healthz", timeout=5)
            assert (health.status_code, health.json()) == (503, {"status": "draining"})
            late = httpx2.post(proxy.base_url + chat.path, json=chat.body, timeout=5,
                               headers=chat.headers(quick))
            assert (late.status_code, late.headers["retry-after"]) == (503, "1")
        except (httpx2.ConnectError, httpx2.ReadError, httpx2.RemoteProtocolError):
            pass
        code = proxy.terminate(timeout=GRACE + 10)
        assert code in (0, -15)
        chat_body, anthropic_body = finishing.result(timeout=5), stalled.result(timeout=5)
    chat_id, anthropic_id = ids[0][0], ids[1][0]

    # The reader of the quick stream got all of it; the stuck one got its prefix and the
    # dialect's error frame saying the proxy shut down.
    assert message_of("openai-chat", chat_body).text == reply_text(31, 8)
    frames = frames_of("anthropic", anthropic_body)
    assert [f.id for f in frames] == [f"{anthropic_id}:{n}" for n in range(1, 7)]
    assert frames[-1].event == "error" and "shut down" in frames[-1].data
    stuck_message = message_of("anthropic", anthropic_body)
    # The proxy's frame says what it journaled: interrupted (it shut down), not a failure.
    assert stuck_message.status is Status.INTERRUPTED
    assert stuck_message.text == anthropic.text_after(32, 8, 5)
    assert isinstance(stuck_message.error, ProxyInterrupted)
    assert (stuck_message.error.code, stuck_message.error.status) == (
        "proxy_shutdown", "interrupted")

    drained = [r for r in log_records(log) if r.get("event") in ("proxy.draining",
                                                                   "proxy.drained")]
    assert [(r["event"], r.get("live_streams"), r.get("stopped")) for r in drained] == [
        ("proxy.draining", "3", None), ("proxy.drained", None, "1")
    ]
    with ProxyProcess.start(mock_server, store, log) as restarted:
        assert stream_status(restarted.base_url, chat_id)["status"] == "completed"
        unread_status = stream_status(restarted.base_url, unread_id)
        assert (unread_status["status"], unread_status["text"]) == (
            "completed", reply_text(33, 8))
        stuck_status = stream_status(restarted.base_url, anthropic_id)
        assert (stuck_status["status"], stuck_status["last_seq"], stuck_status["text"]) == (
            "interrupted", 6, anthropic.text_after(32, 8, 5))
    assert mock_counts(mock_server)["generations"] == {
        "/v1/chat/completions": 1, "/v1/messages": 1, "/api/chat": 1
    }
