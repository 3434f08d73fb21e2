"""``unbroken.stream`` through the unbroken proxy: a cut client connection resumes from the
proxy's journal for every dialect — text exact, one generation, no second upstream request."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest
from tests.integration.test_proxy_support import CALLS, DIALECTS, mock_counts, running_proxy

from unbroken.cli.demo import CutOnceTransport
from unbroken.client import Retry, stream
from unbroken.finish import Status
from unbroken.mock import reply_text

pytestmark = pytest.mark.integration

SEED, TOKENS = 11, 24


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("cut_after", [700, 2500])
def test_a_cut_client_connection_resumes_from_the_journal(
    mock_server: str, dialect: str, cut_after: int
) -> None:
    call = CALLS[dialect]
    log: list[str] = []
    background = dict(call.body, background=True) if dialect == "openai-responses" else call.body
    with (
        running_proxy(mock_server) as (proxy, _),
        httpx2.Client(transport=CutOnceTransport(cut_after, log)) as http,
        stream("POST", proxy + call.path, dialect=dialect, json=background, client=http,
               headers=call.headers(f"seed={SEED}; tokens={TOKENS}"),
               retry=Retry(backoff=0.01)) as s,
    ):
        text = "".join(s.iter_text())
    assert text == reply_text(SEED, TOKENS)
    assert s.message.text == reply_text(SEED, TOKENS)
    assert s.message.status is Status.COMPLETED
    assert s.connections == 2
    assert s.message.duplicates == 0
    # The cut really happened, and the resume named the proxy's stream and the last seq.
    assert log[0].startswith("network cut after")
    resumed = [line for line in log if line.startswith("resume:")]
    assert len(resumed) == 1
    sid_seq = resumed[0].rsplit(" ", 1)[1]
    assert sid_seq.startswith("ub_")
    assert 0 < int(sid_seq.rsplit(":", 1)[1]) < call.total(TOKENS)
    counts = mock_counts(mock_server)
    path = call.path.split("?")[0]
    assert counts["generations"] == {path: 1}
    assert counts.get("resumes", {}) == {}  # served from the journal, not upstream


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_events_route_reads_as_the_same_message(mock_server: str, dialect: str) -> None:
    # GET /v1/streams/{id}/events serves every dialect as SSE with the proxy's ids, Ollama's
    # JSON lines included; reading it after seq 3 gives the rest, exactly.
    call = CALLS[dialect]
    with running_proxy(mock_server) as (proxy, _):
        first = httpx2.post(proxy + call.path, json=call.body,
                            headers=call.headers(f"seed={SEED}; tokens={TOKENS}"), timeout=10)
        assert first.status_code == 200
        stream_id = first.headers["unbroken-stream-id"]
        with stream("GET", f"{proxy}/v1/streams/{stream_id}/events", dialect=dialect,
                    headers={**call.headers(""), "Last-Event-ID": f"{stream_id}:3"}) as s:
            text = "".join(s.iter_text())
    assert text == reply_text(SEED, TOKENS)[len(call.text_after(SEED, TOKENS, 3)):]
    assert s.message.status is Status.COMPLETED
    assert s.message.last_seq == call.total(TOKENS)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_cut_before_the_first_frame_resumes_the_same_stream_from_its_start(
    mock_server: str, dialect: str
) -> None:
    # The proxy answered (its stream id is known) but not one whole frame came: the resume asks
    # for its stream after seq 0, never a fresh POST that would start a second generation.
    call = CALLS[dialect]
    log: list[str] = []
    with (
        running_proxy(mock_server) as (proxy, _),
        httpx2.Client(transport=_CutInFirstFrame(log)) as http,
        stream("POST", proxy + call.path, dialect=dialect, json=call.body, client=http,
               headers=call.headers(f"seed={SEED}; tokens={TOKENS}"),
               retry=Retry(backoff=0.01)) as s,
    ):
        text = "".join(s.iter_text())
    assert (text, s.message.status, s.connections) == (
        reply_text(SEED, TOKENS), Status.COMPLETED, 2)
    assert log == ["cut after 5 bytes", "Last-Event-ID: " + log[1].rsplit(" ", 1)[1]]
    assert log[1].startswith("Last-Event-ID: ub_") and log[1].endswith(":0")
    assert mock_counts(mock_server)["generations"] == {call.path.split("?")[0]: 1}


def test_no_first_event_in_time_resumes_the_proxys_stream_instead_of_a_second_one(
    mock_server: str,
) -> None:
    call = CALLS["openai-chat"]
    # Attempts of 0.5 s each until the 1.5 s stall ends: with the default 3 the last one would
    # time out just as the stall ends (a race decided by the machine's speed), so enough
    # attempts that the stall surely ends inside one of them.
    with (
        running_proxy(mock_server) as (proxy, _),
        stream("POST", proxy + call.path, dialect="openai-chat", json=call.body,
               headers=call.headers(f"seed={SEED}; tokens=5; stall_after=0; stall_s=1.5"),
               first_event_timeout=0.5, retry=Retry(attempts=10, backoff=0.01)) as s,
    ):
        text = "".join(s.iter_text())
    assert (text, s.message.status) == (reply_text(SEED, 5), Status.COMPLETED)
    assert s.connections >= 2
    assert mock_counts(mock_server)["generations"] == {"/v1/chat/completions": 1}


class _CutInFirstFrame(httpx2.BaseTransport):
    """Passes the first response's headers and 5 bytes of its body, then the connection
    breaks: the client knows the proxy's stream id but has no whole frame."""

    def __init__(self, log: list[str]) -> None:
        self._inner = httpx2.HTTPTransport()
        self._log = log

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        last_id = request.headers.get("last-event-id")
        if last_id:
            self._log.append(f"Last-Event-ID: {last_id}")
        response = self._inner.handle_request(request)
        if self._log:
            return response
        self._log.append("cut after 5 bytes")
        return httpx2.Response(response.status_code, headers=response.headers,
                               stream=_FiveBytes(response), extensions=response.extensions)

    def close(self) -> None:
        self._inner.close()


class _FiveBytes(httpx2.SyncByteStream):
    def __init__(self, response: httpx2.Response) -> None:
        self._response = response

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._response.stream:  # type: ignore[union-attr]
            yield chunk[:5]
            break
        raise httpx2.ReadError("connection reset (test)")

    def close(self) -> None:
        self._response.close()
