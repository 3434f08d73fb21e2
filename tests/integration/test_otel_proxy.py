"""OpenTelemetry of the proxy: one CLIENT span per proxied stream (the upstream operation), for
every dialect and end state; a reader's resume is an event on that span while the proxy
produces the stream, never a second operation, and usage is counted once on each side.

The proxy and the client run in this process, both instrumented: their spans are told apart by
``unbroken.component``, their metric points by ``server.port`` (the proxy's upstream is the
mock; the client's is the proxy).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest
from opentelemetry.trace import SpanKind, StatusCode
from tests.integration.test_proxy_support import (
    CALLS,
    KEY,
    OLLAMA_GENERATE,
    Call,
    running_proxy,
    stream_status,
    wait_until_ended,
)
from tests.otel_support import Recorded, recording

from unbroken.cli.demo import CutOnceTransport
from unbroken.client import Retry, stream
from unbroken.mock import reply_text

pytestmark = pytest.mark.integration

T = 3
PROXY_CALLS = {call.path: call for call in [*CALLS.values(), OLLAMA_GENERATE]}
# (span name, provider, operation) per path; the request model is the body's or the path's.
NAMES = {
    "/v1/chat/completions": ("chat m", "openai", "chat"),
    "/v1/responses": ("chat m", "openai", "chat"),
    "/v1/messages": ("chat m", "anthropic", "chat"),
    CALLS["gemini"].path: ("generate_content gemini-m", "gcp.gemini", "generate_content"),
    "/api/chat": ("chat m", "ollama", "chat"),
    "/api/generate": ("text_completion m", "ollama", "text_completion"),
}
RAW = {
    "openai-chat": {"stop": "stop", "length": "length", "content_filter": "content_filter",
                    "error": "server_error"},
    "openai-responses": {"stop": "completed", "length": "max_output_tokens",
                         "content_filter": "content_filter", "error": "server_error"},
    "anthropic": {"stop": "end_turn", "length": "max_tokens", "content_filter": "refusal",
                  "error": "overloaded_error"},
    "gemini": {"stop": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY",
               "error": "MALFORMED_FUNCTION_CALL"},
    "ollama": {"stop": "stop", "length": "length", "error": "error"},
}
STATES = {"completed": "stop", "truncated": "length", "filtered": "content_filter",
          "failed": "error", "interrupted": None, "cancelled": None}
CASES = [(path, state) for path, call in PROXY_CALLS.items() for state in STATES
         if STATES[state] is None or STATES[state] in RAW[call.dialect]]


@pytest.fixture(scope="module")
def proxy(mock_server_session: str) -> Iterator[str]:
    # retry_ms: the SSE retry hint a client honours before resuming, short so that the resume
    # below comes while the proxy still produces the stream.
    with running_proxy(mock_server_session, retry_ms=10) as (base_url, _app):
        yield base_url


def scenario(call: Call, state: str) -> str:
    finish = STATES[state]
    if finish is not None:
        return f"tokens={T}; finish={finish}"
    if state == "interrupted":
        return f"tokens={T}; drop_after={call.first_text + 1}"
    return f"tokens={T}; stall_after={call.first_text}; stall_s=30"  # cancelled while stalled


def run(proxy: str, call: Call, state: str) -> str:
    """One proxied stream that ends ``state``; its stream id."""
    with httpx2.Client(timeout=30) as client, client.stream(
        "POST", proxy + call.path, json=call.body, headers=call.headers(scenario(call, state))
    ) as response:
        assert response.status_code == 200
        stream_id = response.headers["unbroken-stream-id"]
        if state == "cancelled":
            next(response.iter_raw())  # the stream is live
            cancelled = client.post(f"{proxy}/v1/streams/{stream_id}/cancel",
                                    headers={"authorization": f"Bearer {KEY}"})
            assert cancelled.status_code == 200, cancelled.text
        else:
            for _chunk in response.iter_raw():
                pass
    wait_until_ended(proxy, stream_id)
    return stream_id


def proxy_span(recorded: Recorded, stream_id: str) -> Any:
    [span] = [s for s in recorded.spans("proxy")
              if (s.attributes or {}).get("unbroken.stream_id") == stream_id]
    return span


@pytest.mark.parametrize(("path", "state"), CASES)
def test_one_span_per_proxied_stream_for_every_dialect_and_end_state(
    proxy: str, mock_server_session: str, path: str, state: str
) -> None:
    call = PROXY_CALLS[path]
    with recording() as recorded:
        stream_id = run(proxy, call, state)
        status = stream_status(proxy, stream_id)
    assert status["status"] == state
    span = proxy_span(recorded, stream_id)
    name, provider, operation = NAMES[path]
    assert span.name == name
    assert span.kind is SpanKind.CLIENT
    attributes = dict(span.attributes or {})
    finish = STATES[state]
    expected: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": name.split(" ", 1)[1],
        "gen_ai.response.model": name.split(" ", 1)[1],
        "gen_ai.response.id": status["provider_id"],
        "server.address": "127.0.0.1",
        "server.port": urlsplit(mock_server_session).port,
        "unbroken.component": "proxy",
        "unbroken.dialect": call.dialect,
        "unbroken.status": state,
        "unbroken.frames": status["last_seq"],
        "unbroken.resumes": 0,
        "unbroken.retries": 0,
        "unbroken.duplicates": 0,
        "unbroken.gaps": 0,
        "unbroken.stalls": 0,
        "unbroken.stream_id": stream_id,
    }
    if finish is not None:
        expected["gen_ai.response.finish_reasons"] = (RAW[call.dialect][finish],)
        expected["unbroken.finish_reason"] = status["finish_reason"]
        assert status["finish_reason"] == finish
    if state == "failed":
        expected["error.type"] = RAW[call.dialect]["error"]
    if state == "interrupted":
        expected["error.type"] = "TransportError"
    usage = status["usage"]
    if usage is not None:
        expected["gen_ai.usage.input_tokens"] = usage["input_tokens"]
        expected["gen_ai.usage.output_tokens"] = usage["output_tokens"]
    attributes.pop("gen_ai.response.time_to_first_chunk")  # every case had output first
    if expected["gen_ai.response.id"] is None:
        del expected["gen_ai.response.id"]
    assert attributes == expected
    assert span.events == ()
    errored = state in ("failed", "interrupted")
    assert span.status.status_code is (StatusCode.ERROR if errored else StatusCode.UNSET)
    [duration] = recorded.points("gen_ai.client.operation.duration")
    [first] = recorded.points("gen_ai.client.operation.time_to_first_chunk")
    assert (duration.count, first.count) == (1, 1)
    assert first.sum <= duration.sum


@pytest.mark.parametrize("dialect", ["openai-chat", "anthropic"])
def test_a_resumed_stream_is_one_span_per_side_with_one_resume_event(
    proxy: str, dialect: str
) -> None:
    """The client's connection to the proxy is cut once mid-stream; the client resumes by
    Last-Event-ID from the proxy's journal while the proxy still reads the upstream. The client
    has one span with one resume event; so has the proxy (a downstream resume); each side
    counts the operation, its first chunk and its usage once."""
    call = CALLS[dialect]
    log: list[str] = []
    proxy_port = urlsplit(proxy).port
    with (
        recording() as recorded,
        httpx2.Client(transport=CutOnceTransport(700, log)) as http,
        stream("POST", proxy + call.path, dialect=dialect, json=call.body, client=http,
               headers=call.headers("seed=5; tokens=24; delay_ms=20"),
               retry=Retry(backoff=0.01)) as s,
    ):
        text = "".join(s.iter_text())
        stream_id = s.message.trace.frames[0].block_id.split(":")[0]  # type: ignore[union-attr]
        journaled = wait_until_ended(proxy, stream_id)["usage"]
    assert text == reply_text(5, 24)
    assert log[0].startswith("network cut after") and log[1].startswith("resume:")
    [client] = recorded.spans("client")
    client_attributes = dict(client.attributes or {})
    [resume] = client.events
    assert resume.name == "unbroken.resume"
    after = dict(resume.attributes or {})["after_seq"]
    assert dict(resume.attributes or {}) == {"connection": 2, "after_seq": after}
    assert client_attributes["unbroken.resumes"] == 1
    assert client_attributes["unbroken.stream_id"] == stream_id
    assert client_attributes["unbroken.duplicates"] == 0
    assert client_attributes["unbroken.status"] == "completed"
    assert client_attributes["server.port"] == proxy_port

    span = proxy_span(recorded, stream_id)
    [downstream] = span.events
    assert downstream.name == "unbroken.resume"
    assert dict(downstream.attributes or {}) == {"side": "downstream", "after_seq": after}
    assert (span.attributes or {})["unbroken.resumes"] == 1
    # The resume happened inside both operations, after their first chunk.
    for each in (client, span):
        assert each.start_time is not None and each.end_time is not None
        assert each.start_time < resume.timestamp < each.end_time
    # Once per side: one duration, one first chunk, one usage report each.
    for metric in ("gen_ai.client.operation.duration",
                   "gen_ai.client.operation.time_to_first_chunk"):
        ports = {dict(p.attributes or {})["server.port"] for p in recorded.points(metric)
                 if p.count == 1}
        assert len(recorded.points(metric)) == 2 and proxy_port in ports
    # Usage: the proxy's as journaled (it asks OpenAI chat for usage, and hides the answer
    # from a client that did not ask), the client's as its message has it.
    usage = s.message.usage
    tokens = [(dict(p.attributes or {})["server.port"] == proxy_port,
               dict(p.attributes or {})["gen_ai.token.type"], p.count, p.sum)
              for p in recorded.points("gen_ai.client.token.usage")]
    expected = [(False, kind, 1, journaled[f"{kind}_tokens"]) for kind in ("input", "output")]
    if usage is not None:
        expected += [(True, "input", 1, usage.input_tokens),
                     (True, "output", 1, usage.output_tokens)]
    assert dialect != "openai-chat" or usage is None
    assert sorted(tokens) == sorted(expected)


def test_the_otel_option_turns_telemetry_on_for_the_proxy() -> None:
    """``unbroken proxy --otel``: the config says so, and the app instruments this process
    (through the global providers) when it is made."""
    from unbroken import telemetry
    from unbroken.proxy import create_app
    from unbroken.proxy.__main__ import build_parser, config_from_args

    config = config_from_args(build_parser().parse_args(["--otel", "--store", "memory://"]))
    assert (config.otel, config.otel_chunk_intervals) == (True, "mean")
    assert not config_from_args(build_parser().parse_args([])).otel
    assert not telemetry.instrumented()
    try:
        create_app(config)
        assert telemetry.instrumented()
    finally:
        telemetry.uninstrument()


def test_the_otel_chunk_intervals_option_reaches_the_recorder(
    capsys: pytest.CaptureFixture[str]
) -> None:
    """``--otel-chunk-intervals each`` records one point per output frame; without ``--otel``
    it is refused with a message."""
    from unbroken import telemetry
    from unbroken.proxy import create_app
    from unbroken.proxy.__main__ import build_parser, config_from_args, main

    config = config_from_args(build_parser().parse_args(
        ["--otel", "--otel-chunk-intervals", "each", "--store", "memory://"]))
    assert config.otel_chunk_intervals == "each"
    try:
        create_app(config)
        assert telemetry._recorder is not None and telemetry._recorder.each_chunk
    finally:
        telemetry.uninstrument()
    with pytest.raises(SystemExit) as refused:
        main(["--otel-chunk-intervals", "each", "--store", "memory://"])
    assert refused.value.code == 2
    assert "--otel-chunk-intervals needs --otel" in capsys.readouterr().err


def test_the_proxys_span_carries_the_completion_when_content_is_captured(proxy: str) -> None:
    """The producer keeps no copy of the text (the journal has it) unless the span is to carry
    it: with content capture on, the proxy's span has the exact completion."""
    import json

    call = PROXY_CALLS["/v1/chat/completions"]
    with recording(capture_content=True) as recorded:
        stream_id = run(proxy, call, "completed")
    span = proxy_span(recorded, stream_id)
    assert json.loads(str((span.attributes or {})["gen_ai.output.messages"])) == [
        {"role": "assistant", "parts": [{"type": "text", "content": reply_text(0, T)}],
         "finish_reason": "stop"}]


@pytest.mark.parametrize("path", list(PROXY_CALLS))
def test_the_proxys_span_carries_the_prompt_when_content_is_captured(proxy: str,
                                                                     path: str) -> None:
    """Every dialect's request, as its dialect reads it into the conventions' shape: the one
    user message "hi" (no system instructions in these requests); nothing without capture."""
    import json

    call = PROXY_CALLS[path]
    with recording(capture_content=True) as recorded:
        stream_id = run(proxy, call, "completed")
    attributes = dict(proxy_span(recorded, stream_id).attributes or {})
    assert json.loads(str(attributes["gen_ai.input.messages"])) == [
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]}]
    assert "gen_ai.system_instructions" not in attributes
    with recording() as recorded:
        stream_id = run(proxy, call, "completed")
    attributes = dict(proxy_span(recorded, stream_id).attributes or {})
    assert "gen_ai.input.messages" not in attributes


def test_the_proxys_span_continues_the_callers_trace(proxy: str) -> None:
    """A request with a W3C ``traceparent`` (an instrumented app's HTTP client sends one): the
    proxy's span is that span's child, in its trace; without one, a trace of its own."""
    call = PROXY_CALLS["/v1/chat/completions"]
    trace_id, parent_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    with recording() as recorded, httpx2.Client(timeout=30) as client:
        headers = {**call.headers(scenario(call, "completed")),
                   "traceparent": f"00-{trace_id}-{parent_id}-01"}
        with client.stream("POST", proxy + call.path, json=call.body,
                           headers=headers) as response:
            stream_id = response.headers["unbroken-stream-id"]
            response.read()
        wait_until_ended(proxy, stream_id)
        traced = proxy_span(recorded, stream_id)
        untraced = proxy_span(recorded, run(proxy, call, "completed"))
    assert traced.parent is not None
    assert (f"{traced.context.trace_id:032x}", f"{traced.parent.span_id:016x}") \
        == (trace_id, parent_id)
    assert traced.parent.is_remote
    assert untraced.parent is None
    assert untraced.context.trace_id != traced.context.trace_id


def test_unbroken_stream_carries_the_callers_trace_to_the_proxy(proxy: str) -> None:
    """``unbroken.stream`` inside an app's span sends ``traceparent``: its own span and the
    proxy's are both children of that span, in one trace. Outside any span it sends none."""
    from opentelemetry.sdk.trace import TracerProvider

    call = CALLS["openai-chat"]
    app_tracer = TracerProvider().get_tracer("app")
    with recording() as recorded:
        with app_tracer.start_as_current_span("handle request") as handler, stream(
            "POST", proxy + call.path, dialect="openai-chat", json=call.body,
            headers=call.headers(f"tokens={T}"),
        ) as s:
            list(s)
        stream_id = s.message.trace.frames[0].block_id.split(":")[0]  # type: ignore[union-attr]
        wait_until_ended(proxy, stream_id)
        span = proxy_span(recorded, stream_id)
        [client] = recorded.spans("client")
    parent = handler.get_span_context()
    for child in (client, span):
        assert child.parent is not None
        assert (child.context.trace_id, child.parent.span_id) \
            == (parent.trace_id, parent.span_id)
    assert span.parent is not None and span.parent.is_remote
    with recording() as recorded, stream(
        "POST", proxy + call.path, dialect="openai-chat", json=call.body,
        headers=call.headers(f"tokens={T}"),
    ) as s:
        list(s)
        assert "traceparent" not in s._session.headers
    assert s._session.headers["accept-encoding"] == "identity"  # the headers are these
