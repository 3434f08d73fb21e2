"""``GET /metrics``: stream duration by end state, and time to first chunk, with its rule.

The first chunk is the first frame with output (text, reasoning, a tool call), never a
lifecycle event: an Anthropic stream whose start and ping arrive at once and whose first text
comes after a stall has its first chunk at the text, as the journal's receive times show; a
stream that ended before any output has no first chunk at all.
"""

from __future__ import annotations

import json
import re

import httpx2
import pytest
from tests.integration.test_proxy_support import (
    CALLS,
    KEY,
    FrameReader,
    running_proxy,
    stream_status,
)

pytestmark = pytest.mark.integration

AUTH = {"authorization": f"Bearer {KEY}"}
_SAMPLE = re.compile(r"^([a-z_]+)(\{[^}]*\})? (\S+)$")


def samples(proxy: str) -> dict[str, float]:
    text = httpx2.get(proxy + "/metrics", timeout=10).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is not None:
            out[match[1] + (match[2] or "")] = float(match[3])
    return out


def post(proxy: str, dialect: str, scenario: str) -> str:
    call = CALLS[dialect]
    response = httpx2.post(proxy + call.path, json=call.body, headers=call.headers(scenario),
                           timeout=30)
    assert response.status_code == 200
    return response.headers["unbroken-stream-id"]


def test_end_states_and_first_chunks(mock_server: str) -> None:
    with running_proxy(mock_server) as (proxy, _app):
        assert not any(name.startswith(("unbroken_stream_seconds",
                                        "unbroken_time_to_first_chunk"))
                       for name in samples(proxy))
        completed = post(proxy, "openai-chat", "seed=1; tokens=3")
        # Only the role chunk (a lifecycle frame) arrives, then the upstream breaks.
        no_output = post(proxy, "openai-chat", "seed=1; tokens=3; drop_after=1")
        # message_start, content_block_start and ping at once; the first text 0.2 s later.
        stalled = post(proxy, "anthropic", "seed=2; tokens=3; stall_after=3; stall_s=0.2")
        call = CALLS["anthropic"]
        with httpx2.Client(timeout=30) as client:
            with client.stream("POST", proxy + call.path, json=call.body,
                               headers=call.headers("seed=3; tokens=5; stall_after=5; "
                                                    "stall_s=30")) as response:
                cancelled = response.headers["unbroken-stream-id"]
                reader = FrameReader(response, "anthropic")
                reader.take(5)
                assert client.post(f"{proxy}/v1/streams/{cancelled}/cancel",
                                   headers=AUTH).status_code == 200
                reader.rest()
            capture = client.get(f"{proxy}/v1/streams/{stalled}/capture", headers=AUTH)
        statuses = [stream_status(proxy, stream_id)["status"]
                    for stream_id in (completed, no_output, stalled, cancelled)]
        assert statuses == ["completed", "interrupted", "completed", "cancelled"]
        got = samples(proxy)

    ended = {name: value for name, value in got.items()
             if name.startswith("unbroken_stream_seconds_count")}
    assert ended == {
        'unbroken_stream_seconds_count{dialect="anthropic",status="cancelled"}': 1,
        'unbroken_stream_seconds_count{dialect="anthropic",status="completed"}': 1,
        'unbroken_stream_seconds_count{dialect="openai-chat",status="completed"}': 1,
        'unbroken_stream_seconds_count{dialect="openai-chat",status="interrupted"}': 1,
    }
    first = {name: value for name, value in got.items()
             if name.startswith("unbroken_time_to_first_chunk_seconds_count")}
    # The stream with no output has no first chunk: one for openai-chat, not two.
    assert first == {
        'unbroken_time_to_first_chunk_seconds_count{dialect="anthropic"}': 2,
        'unbroken_time_to_first_chunk_seconds_count{dialect="openai-chat"}': 1,
    }
    # Buckets are cumulative, ending with +Inf at the count.
    assert got['unbroken_time_to_first_chunk_seconds_bucket{dialect="openai-chat",le="+Inf"}'] \
        == 1

    # The stalled stream's first chunk is its first text frame (seq 4), not its start: the
    # time counts from the request, sent before the stream was created, so it is at least that
    # frame's receive time since creation. The sum holds the cancelled stream's too (its first
    # text came at once): were a start or a ping taken, both would be far below that.
    reads = [json.loads(line) for line in capture.content.splitlines() if b'"seq"' in line]
    assert [read["seq"] for read in reads] == list(range(1, CALLS["anthropic"].total(3) + 1))
    first_text = reads[3]["t"]
    assert first_text > reads[2]["t"]  # the stall lies between the ping and the first text
    stalled_ttfc = got['unbroken_time_to_first_chunk_seconds_sum{dialect="anthropic"}']
    assert stalled_ttfc >= first_text - 1e-6
    # A stream's duration is at least its time to first chunk.
    assert got['unbroken_stream_seconds_sum{dialect="anthropic",status="completed"}'] \
        >= first_text - 1e-6
