"""OpenTelemetry of the SDK wrappers and of ``unbroken.server``.

An SDK wrapper's stream is one CLIENT span named by its operation alone: the SDK sent the request
before the wrapper saw it, so the requested model is not known (the response's model is). A
``ResumableStreams`` stream whose source is a tracked provider stream (``unbroken.astream``, an
SDK wrapper) adds no operation of its own: a reader's resume is an event on the source's span,
which carries the server's stream id. (An app's own values are no GenAI operation: no span.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from openai import AsyncOpenAI, OpenAI
from opentelemetry.trace import SpanKind
from tests.integration.server_app import build_app
from tests.integration.test_server_streams import end_of, read_events, start
from tests.otel_support import recording
from tests.servers import serve_in_thread

import unbroken
from unbroken.mock import reply_text

pytestmark = pytest.mark.integration

T = 4


def sdk_attributes(span: Any) -> dict[str, Any]:
    attributes = dict(span.attributes or {})
    for dynamic in ("gen_ai.response.id", "gen_ai.response.time_to_first_chunk"):
        attributes.pop(dynamic)
    return attributes


SDK_EXPECTED = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "openai",
    "gen_ai.response.model": "m",
    "gen_ai.response.finish_reasons": ("length",),
    "gen_ai.usage.input_tokens": 12,
    "gen_ai.usage.output_tokens": T,
    "unbroken.component": "sdk",
    "unbroken.dialect": "openai-chat",
    "unbroken.status": "truncated",
    "unbroken.finish_reason": "length",
    "unbroken.frames": T + 3,  # role, the text deltas, the finish, the usage chunk
    "unbroken.resumes": 0,
    "unbroken.retries": 0,
    "unbroken.duplicates": 0,
    "unbroken.gaps": 0,
    "unbroken.stalls": 0,
}


def test_from_openai_records_one_span(mock_server: str) -> None:
    with recording() as recorded, OpenAI(base_url=mock_server + "/v1", api_key="sk-test",
                                         max_retries=0) as client:
        raw = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True,
            stream_options={"include_usage": True},
            extra_headers={"Unbroken-Mock": f"seed=2; tokens={T}; finish=length"})
        with unbroken.from_openai(raw) as tracked:
            text = "".join(tracked.iter_text())
    assert text == reply_text(2, T)
    [span] = recorded.spans()
    assert (span.name, span.kind) == ("chat", SpanKind.CLIENT)
    assert sdk_attributes(span) == SDK_EXPECTED
    assert (span.attributes or {})["gen_ai.response.id"] == tracked.message.id
    [first] = recorded.points("gen_ai.client.operation.time_to_first_chunk")
    assert first.count == 1
    assert first.sum == (span.attributes or {})["gen_ai.response.time_to_first_chunk"]
    [mean] = recorded.points("gen_ai.client.operation.time_per_output_chunk")
    assert mean.count == 1  # one point per stream: the mean of its T - 1 intervals


@pytest.mark.anyio
async def test_from_openai_async_and_a_caller_who_leaves_early(mock_server: str) -> None:
    with recording() as recorded:
        async with AsyncOpenAI(base_url=mock_server + "/v1", api_key="sk-test",
                               max_retries=0) as client:
            raw = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True,
                extra_headers={"Unbroken-Mock": f"seed=2; tokens={T}"})
            async with unbroken.from_openai(raw) as tracked:
                async for _text in tracked.iter_text():
                    break
    [span] = recorded.spans()
    attributes = dict(span.attributes or {})
    assert attributes["unbroken.status"] == "cancelled"
    assert "error.type" not in attributes  # the caller's choice, not an error
    assert "gen_ai.response.finish_reasons" not in attributes


@pytest.fixture
def app_url(tmp_path: Path, mock_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("UNBROKEN_TEST_MOCK", mock_server)
    app, _streams = build_app(f"sqlite:///{tmp_path / 'app.db'}", keepalive=0.5,
                              idle_timeout=5.0)
    with serve_in_thread(app) as url:
        yield url


@pytest.mark.parametrize(("kind", "component"), [("astream", "client"), ("sdk", "sdk")])
def test_a_reader_resuming_a_server_stream_is_an_event_on_its_source_span(
    app_url: str, kind: str, component: str
) -> None:
    with recording() as recorded:
        stream_id = start(app_url, kind=kind, n=20, interval=0.05)["stream_id"]
        status, first = read_events(app_url, stream_id, limit=3)
        assert status == 200
        status, rest = read_events(app_url, stream_id, headers={"last-event-id": first[-1].id})
        assert status == 200
        assert end_of(rest)["status"] == "truncated"
        got = httpx2.get(f"{app_url}/streams/{stream_id}", headers={"x-owner": "alice"},
                         timeout=10)
        assert got.json()["status"] == "truncated"
    [span] = recorded.spans()
    attributes = dict(span.attributes or {})
    assert attributes["unbroken.component"] == component
    assert attributes["unbroken.stream_id"] == stream_id
    assert attributes["unbroken.status"] == "truncated"
    assert attributes["unbroken.resumes"] == 1
    assert [(e.name, dict(e.attributes or {})) for e in span.events] == [
        ("unbroken.resume", {"side": "downstream", "after_seq": 3})]
    [duration] = recorded.points("gen_ai.client.operation.duration")
    assert duration.count == 1
