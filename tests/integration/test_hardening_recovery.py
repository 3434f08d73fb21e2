"""Crash recovery with producer leases: the proxy process is SIGKILLed mid-stream, restarted on
the same SQLite file, and every journaled frame is still there, the stream ``interrupted`` with
its reason; a Responses background stream is re-attached upstream when its owner resumes it."""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from tests.integration.hardening_process import ProxyProcess, log_records
from tests.integration.test_proxy_support import (
    CALLS,
    DIALECTS,
    KEY,
    OTHER_KEY,
    FrameReader,
    frames_of,
    message_of,
    mock_counts,
    stream_status,
)

from unbroken.client import Retry, astream, stream
from unbroken.errors import Interrupted, ProxyInterrupted, StreamError
from unbroken.finish import Status
from unbroken.message import Message
from unbroken.mock import reply_text

pytestmark = pytest.mark.integration

LEASE = ("--lease-ttl", "1", "--lease-renew", "0.2", "--log-level", "info")
AUTH = {"authorization": f"Bearer {KEY}"}


def _status_when_settled(proxy: str, stream_id: str) -> dict[str, Any]:
    """The stream's status once its dead producer's lease ran out (at most a few seconds)."""
    deadline = time.monotonic() + 15
    while True:
        status = stream_status(proxy, stream_id)
        if status["status"] != "streaming":
            return status
        assert time.monotonic() < deadline, "the lease never expired"
        time.sleep(0.1)


def _read_events(flavour: str, proxy: str, stream_id: str,
                 dialect: str) -> tuple[Message, StreamError | None, int]:
    """``GET /v1/streams/{id}/events`` read to its end by ``unbroken.stream`` / ``astream``."""
    url = f"{proxy}/v1/streams/{stream_id}/events"
    if flavour == "sync":
        with stream("GET", url, dialect=dialect, headers=AUTH, retry=Retry(backoff=0.01)) as s:
            try:
                for _ in s:
                    pass
            except StreamError as err:
                return s.message, err, s.connections
            return s.message, None, s.connections

    async def main() -> tuple[Message, StreamError | None, int]:
        async with astream("GET", url, dialect=dialect, headers=AUTH,
                           retry=Retry(backoff=0.01)) as s:
            try:
                async for _ in s:
                    pass
            except StreamError as err:
                return s.message, err, s.connections
            return s.message, None, s.connections

    return asyncio.run(main())


def test_sigkill_mid_stream_keeps_every_frame_and_reports_interrupted(
    tmp_path: Path, mock_server: str
) -> None:
    store, log = tmp_path / "journal.db", tmp_path / "proxy.log"
    call = CALLS["anthropic"]
    scenario = "seed=21; tokens=10; stall_after=7; stall_s=30"
    first = ProxyProcess.start(mock_server, store, log, *LEASE)
    try:
        with httpx2.stream("POST", first.base_url + call.path, json=call.body, timeout=10,
                           headers=call.headers(scenario)) as response:
            stream_id = response.headers["unbroken-stream-id"]
            before = FrameReader(response, "anthropic").take(7)
            first.kill()  # mid-stream: the upstream is stalled after frame 7
    finally:
        first.kill()

    with ProxyProcess.start(mock_server, store, log, *LEASE) as second:
        status = _status_when_settled(second.base_url, stream_id)
        assert (status["status"], status["last_seq"]) == ("interrupted", 8)
        assert status["text"] == call.text_after(21, 10, 7)
        assert status["error"]["type"] == "proxy_restarted"
        assert "lease expired" in status["error"]["message"]
        # Every frame the dead process journaled, byte for byte, then the error frame.
        events = httpx2.get(f"{second.base_url}/v1/streams/{stream_id}/events", headers=AUTH)
        after = frames_of("anthropic", events.content)
        assert [(e.event, e.data, e.id) for e in after[:7]] == [
            (e.event, e.data, e.id) for e in before
        ]
        assert [(e.event, e.id) for e in after[7:]] == [("error", f"{stream_id}:8")]
        # The dialect's own error shape (the SDK raises), with the proxy's mark: read as the
        # status the proxy journaled, the exact prefix kept.
        assert json.loads(after[7].data)["error"] == {
            "type": "api_error", "message": status["error"]["message"],
            "unbroken": {"code": "proxy_restarted", "status": "interrupted",
                         "resumable": "false"}}
        read = message_of("anthropic", events.content)
        assert (read.status, read.text, read.last_seq) == (
            Status.INTERRUPTED, call.text_after(21, 10, 7), 8)
        assert isinstance(read.error, ProxyInterrupted) and read.error.code == "proxy_restarted"
        # The same POST resumed after seq 3: frames 4..8, no upstream request.
        resumed = httpx2.post(second.base_url + call.path, json=call.body, timeout=10,
                              headers=call.headers(scenario) | {"Last-Event-ID": f"{stream_id}:3"})
        assert [e.id for e in frames_of("anthropic", resumed.content)] == [
            f"{stream_id}:{n}" for n in range(4, 9)
        ]
        # Another credential still cannot read it.
        other = httpx2.get(f"{second.base_url}/v1/streams/{stream_id}",
                           headers={"authorization": f"Bearer {OTHER_KEY}"})
        assert other.status_code == 404
    assert mock_counts(mock_server)["generations"] == {"/v1/messages": 1}
    recovered = [r for r in log_records(log) if r.get("event") == "stream.recovered"]
    assert [(r["stream_id"], r["seq"]) for r in recovered] == [(stream_id, "8")]


def test_sigkill_with_a_live_stream_of_every_dialect_keeps_all_their_frames(
    tmp_path: Path, mock_server: str
) -> None:
    store, log = tmp_path / "journal.db", tmp_path / "proxy.log"
    read: dict[str, tuple[str, int, list[str]]] = {}  # dialect: stream id, frames, their data
    first = ProxyProcess.start(mock_server, store, log, *LEASE)
    try:
        with ExitStack() as stack:
            for index, dialect in enumerate(DIALECTS):
                call = CALLS[dialect]
                taken = call.first_text + 2  # two text frames in
                scenario = f"seed={70 + index}; tokens=8; stall_after={taken}; stall_s=30"
                response = stack.enter_context(httpx2.stream(
                    "POST", first.base_url + call.path, json=call.body, timeout=10,
                    headers=call.headers(scenario)))
                frames = FrameReader(response, dialect).take(taken)
                data = [f.raw.rstrip(b"\r\n").decode() if dialect == "ollama" else f.data
                        for f in frames]
                read[dialect] = (response.headers["unbroken-stream-id"], taken, data)
            first.kill()
    finally:
        first.kill()

    with ProxyProcess.start(mock_server, store, log, *LEASE) as second:
        for index, dialect in enumerate(DIALECTS):
            stream_id, taken, data = read[dialect]
            status = _status_when_settled(second.base_url, stream_id)
            assert (status["status"], status["last_seq"], status["text"]) == (
                "interrupted", taken + 1, CALLS[dialect].text_after(70 + index, 8, taken))
            # The events endpoint serves every dialect as SSE with ids: each journaled frame
            # as it was sent, then the dialect's error frame.
            events = frames_of("openai-chat", httpx2.get(
                f"{second.base_url}/v1/streams/{stream_id}/events", headers=AUTH).content)
            assert [e.data for e in events[:taken]] == data
            assert [e.id for e in events] == [
                f"{stream_id}:{n}" for n in range(1, taken + 2)]
            assert "lease expired" in events[-1].data and "error" in events[-1].data
            # unbroken.stream and astream read the proxy's end as it journaled it.
            for flavour in ("sync", "async"):
                message, raised, connections = _read_events(flavour, second.base_url,
                                                             stream_id, dialect)
                assert (message.status, message.text, message.last_seq, connections) == (
                    Status.INTERRUPTED, status["text"], taken + 1, 1)
                assert isinstance(raised, ProxyInterrupted) and isinstance(raised, Interrupted)
                assert (raised.code, raised.status) == ("proxy_restarted", "interrupted")
    assert mock_counts(mock_server)["generations"] == {
        CALLS[d].path.partition("?")[0]: 1 for d in DIALECTS}


def test_background_streams_resumed_by_their_owner_after_sigkill_complete(
    tmp_path: Path, mock_server: str
) -> None:
    store, log = tmp_path / "journal.db", tmp_path / "proxy.log"
    call = CALLS["openai-responses"]
    scenario = "seed=22; tokens=10; stall_after=8; stall_s=30"
    other_scenario = "seed=24; tokens=10; stall_after=6; stall_s=30"
    body = {"model": "m", "stream": True, "input": "hi", "background": True}
    first = ProxyProcess.start(mock_server, store, log, *LEASE)
    try:
        with ExitStack() as stack:
            response = stack.enter_context(httpx2.stream(
                "POST", first.base_url + call.path, json=body, timeout=10,
                headers=call.headers(scenario)))
            stream_id = response.headers["unbroken-stream-id"]
            token = response.headers["unbroken-stream-token"]
            before = FrameReader(response, "openai-responses").take(8)
            other = stack.enter_context(httpx2.stream(
                "POST", first.base_url + call.path, json=body, timeout=10,
                headers=call.headers(other_scenario)))
            other_id = other.headers["unbroken-stream-id"]
            other_before = FrameReader(other, "openai-responses").take(6)
            first.kill()
    finally:
        first.kill()

    with ProxyProcess.start(mock_server, store, log, *LEASE) as second:
        status = _status_when_settled(second.base_url, stream_id)
        # Continuable: interrupted with its reason, but no error frame journaled.
        assert (status["status"], status["last_seq"]) == ("interrupted", 8)
        assert status["error"]["type"] == "proxy_restarted"
        # A token holder reads what is stored; it cannot pay for the upstream resume, so its
        # read ends with an error event that has no id (not journaled: the stream may go on).
        by_token = httpx2.get(f"{second.base_url}/v1/streams/{stream_id}/events?token={token}")
        read = frames_of("openai-responses", by_token.content)
        assert [e.block_id for e in read] == [f"{stream_id}:{n}" for n in range(1, 9)] + [None]
        assert read[-1].event == "error" and '"code":"proxy_restarted"' in read[-1].data
        assert mock_counts(mock_server)["generations"] == {"/v1/responses": 2}
        assert "resumes" not in mock_counts(mock_server) or not mock_counts(
            mock_server)["resumes"]

        # The owner resumes with the official SDK: the proxy re-attaches upstream.
        with openai.OpenAI(base_url=second.base_url + "/v1", api_key=KEY,
                           max_retries=0) as client:
            events = list(client.responses.create(
                model="m", input="hi", stream=True, background=True,
                extra_headers={"Unbroken-Mock": scenario,
                               "Last-Event-ID": f"{stream_id}:8"},
            ))
        head = message_of("openai-responses", b"".join(e.raw for e in before)).text
        tail = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert head + tail == reply_text(22, 10)
        assert head == call.text_after(22, 10, 8)
        assert events[-1].type == "response.completed"
        total = call.total(10)
        assert [e.sequence_number for e in events] == list(range(8, total))
        status = stream_status(second.base_url, stream_id)
        assert (status["status"], status["text"], status["last_seq"]) == (
            "completed", reply_text(22, 10), total
        )
        assert status["upstream_requests"] == 2

        # The other one's owner resumes on the events endpoint (any dialect as SSE).
        _status_when_settled(second.base_url, other_id)
        resumed = httpx2.get(f"{second.base_url}/v1/streams/{other_id}/events", timeout=10,
                             headers=AUTH | {"Last-Event-ID": f"{other_id}:6"})
        rest = frames_of("openai-responses", resumed.content)
        assert [e.id for e in rest] == [f"{other_id}:{n}" for n in range(7, total + 1)]
        joined = message_of("openai-responses",
                            b"".join(e.raw for e in other_before) + resumed.content)
        assert (joined.status, joined.text) == (Status.COMPLETED, reply_text(24, 10))

        metrics = httpx2.get(second.base_url + "/metrics").text.splitlines()
        assert "unbroken_upstream_resumes_total 2" in metrics
        assert "unbroken_resumes_total 2" in metrics
        assert "unbroken_streams_started_total 0" in metrics  # no new stream: the same ones
    assert mock_counts(mock_server) == {
        "generations": {"/v1/responses": 2}, "resumes": {"/v1/responses": 2}
    }
    attached = [r for r in log_records(log) if r.get("event") == "stream.reattach"]
    assert [(r["stream_id"], r["seq"]) for r in attached] == [(stream_id, "8"), (other_id, "6")]


def test_a_reader_right_after_the_restart_waits_for_the_lease_and_gets_the_end(
    tmp_path: Path, mock_server: str
) -> None:
    store, log = tmp_path / "journal.db", tmp_path / "proxy.log"
    call = CALLS["openai-chat"]
    scenario = "seed=23; tokens=10; stall_after=6; stall_s=30"
    lease = ("--lease-ttl", "2", "--lease-renew", "0.2")
    first = ProxyProcess.start(mock_server, store, log, *lease)
    try:
        with httpx2.stream("POST", first.base_url + call.path, json=call.body, timeout=10,
                           headers=call.headers(scenario)) as response:
            stream_id = response.headers["unbroken-stream-id"]
            FrameReader(response, "openai-chat").take(6)
            first.kill()
    finally:
        first.kill()
    with ProxyProcess.start(mock_server, store, log, *lease) as second:
        # At once, while the dead process's lease still runs: the resume waits it out, then
        # gets the error frame that ends the stream instead of a silent stop after frame 6.
        resumed = httpx2.post(second.base_url + call.path, json=call.body, timeout=10,
                              headers=call.headers(scenario) | {"Last-Event-ID": f"{stream_id}:6"})
        [last] = frames_of("openai-chat", resumed.content)
        assert last.id == f"{stream_id}:7"
        assert '"code":"proxy_restarted"' in last.data
    assert mock_counts(mock_server)["generations"] == {"/v1/chat/completions": 1}
