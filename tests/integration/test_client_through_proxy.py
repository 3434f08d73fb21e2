"""``unbroken.stream`` through the unbroken proxy: a cut client connection resumes from the
proxy's journal for every dialect — text exact, one generation, no second upstream request."""

from __future__ import annotations

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
