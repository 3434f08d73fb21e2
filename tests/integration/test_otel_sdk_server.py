"""OpenTelemetry of the SDK wrappers and of ``unbroken.server``.

An SDK wrapper's stream is one CLIENT span. The SDK sent the request before the wrapper saw it:
where the SDK keeps its HTTP response on the stream (openai, anthropic) the request's URL and
model are read from it; otherwise (google-genai, ollama, boto3) the span names the operation and
the response's model only, or the model in a Gemini or Bedrock path. A
``ResumableStreams`` stream whose source is a tracked provider stream (``unbroken.astream``, an
SDK wrapper) adds no operation of its own: a reader's resume is an event on the source's span,
which carries the server's stream id. (An app's own values are no GenAI operation: no span.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest
from anthropic import Anthropic
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
    for dynamic in ("gen_ai.response.id", "gen_ai.response.time_to_first_chunk", "server.port"):
        attributes.pop(dynamic)
    return attributes


SDK_EXPECTED = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "openai",
    "gen_ai.request.model": "m",
    "server.address": "127.0.0.1",
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
    assert (span.name, span.kind) == ("chat m", SpanKind.CLIENT)
    assert sdk_attributes(span) == SDK_EXPECTED
    assert (span.attributes or {})["server.port"] == urlsplit(mock_server).port
    assert (span.attributes or {})["gen_ai.response.id"] == tracked.message.id
    [first] = recorded.points("gen_ai.client.operation.time_to_first_chunk")
    assert first.count == 1
    assert first.sum == (span.attributes or {})["gen_ai.response.time_to_first_chunk"]
    [mean] = recorded.points("gen_ai.client.operation.time_per_output_chunk")
    assert mean.count == 1  # one point per stream: the mean of its T - 1 intervals


@pytest.mark.parametrize("manager", [False, True])
def test_from_anthropic_names_the_request_model(mock_server: str, manager: bool) -> None:
    """The request is read off the SDK's stream, and off the one a ``messages.stream(...)``
    manager gives when the wrapper enters it."""
    kwargs: dict[str, Any] = {
        "model": "claude-m", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}],
        "extra_headers": {"Unbroken-Mock": f"seed=3; tokens={T}"}}
    with recording() as recorded, Anthropic(base_url=mock_server, api_key="sk-test",
                                            max_retries=0) as client:
        raw: Any = client.messages.stream(**kwargs) if manager \
            else client.messages.create(stream=True, **kwargs)
        with unbroken.from_anthropic(raw) as tracked:
            text = "".join(tracked.iter_text())
    assert text == reply_text(3, T)
    [span] = recorded.spans()
    attributes = dict(span.attributes or {})
    assert span.name == "chat claude-m"
    assert (attributes["gen_ai.request.model"], attributes["gen_ai.provider.name"],
            attributes["server.address"], attributes["unbroken.status"]) \
        == ("claude-m", "anthropic", "127.0.0.1", "completed")


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
