"""Bedrock InvokeModelWithResponseStream (Claude) end to end: boto3's own client and unbroken
against the mock, directly and through the proxy.

boto3 is AWS's reference for the wire: it reads the mock's chunk messages and hands back each
Anthropic event's bytes, decoded from base64. Credentials are fake (the mock checks no
signature; the proxy forwards it untouched).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import botocore.config
import botocore.eventstream
import httpx2
import pytest
from botocore.exceptions import EventStreamError
from tests.integration.test_proxy_support import mock_counts, running_proxy

import unbroken
from unbroken.cli.demo import CutOnceTransport
from unbroken.client import Retry, stream
from unbroken.errors import Interrupted, PayloadError, ProviderError, ProxyInterrupted
from unbroken.finish import FinishReason, Status
from unbroken.framing import EventStreamDecoder
from unbroken.mock import reply_deltas, reply_text

pytestmark = pytest.mark.integration

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
PATH = f"/model/{MODEL}/invoke-with-response-stream"
REQUEST: Any = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 256,
                "messages": [{"role": "user", "content": "hi"}]}
KEY = {"Authorization": "Bearer ABSKQmVkcm9ja0FQSUtleS1mYWtl"}
TOOL_ARGUMENTS = '{"city": "東京 🌧", "unit": "celsius"}'


def client_at(base_url: str, scenario: str) -> Any:
    made = boto3.client(
        "bedrock-runtime", region_name="us-east-1", endpoint_url=base_url,
        aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="fake-secret",
        config=botocore.config.Config(retries={"max_attempts": 1}, connect_timeout=5,
                                      read_timeout=10),
    )
    made.meta.events.register(
        "before-sign.bedrock-runtime.*",
        lambda request, **_: request.headers.__setitem__("Unbroken-Mock", scenario))
    return made


@pytest.fixture
def bedrock(mock_server: str) -> Iterator[Callable[[str], Any]]:
    """boto3 bedrock-runtime clients at the mock, one scenario each."""
    made: list[Any] = []

    def client(scenario: str) -> Any:
        made.append(client_at(mock_server, scenario))
        return made[-1]

    yield client
    for each in made:
        each.close()


def invoke(client: Any) -> Any:
    return client.invoke_model_with_response_stream(modelId=MODEL, body=json.dumps(REQUEST))


def kinds(events: list[Any]) -> list[str]:
    return [json.loads(event["chunk"]["bytes"])["type"] for event in events]


def test_boto3_reads_the_mock_and_from_bedrock_tracks_it(bedrock: Callable[[str], Any]) -> None:
    response = invoke(bedrock("seed=3; tokens=12"))
    tracked = unbroken.from_bedrock(response)
    events = list(tracked)
    response["body"].close()
    assert kinds(events) == ["message_start", "content_block_start",
                             *["content_block_delta"] * 12, "content_block_stop",
                             "message_delta", "message_stop"]
    text = "".join(json.loads(e["chunk"]["bytes"])["delta"]["text"] for e in events[2:14])
    assert text == reply_text(3, 12)
    assert json.loads(events[-1]["chunk"]["bytes"])["amazon-bedrock-invocationMetrics"] == {
        "inputTokenCount": 12, "outputTokenCount": 12, "invocationLatency": 100,
        "firstByteLatency": 50}
    message = tracked.message
    assert (message.status, message.finish_reason, message.raw_finish_reason) == (
        Status.COMPLETED, FinishReason.STOP, "end_turn")
    assert message.text == reply_text(3, 12)
    assert message.usage is not None
    assert (message.usage.input_tokens, message.usage.output_tokens) == (12, 12)
    assert message.trace is not None and message.trace.warnings == []


def test_boto3_tool_call_and_the_bare_stream(bedrock: Callable[[str], Any]) -> None:
    response = invoke(bedrock("tokens=2; finish=tool_calls"))
    tracked = unbroken.from_bedrock(response["body"])  # the first event tells the operation
    list(tracked)
    response["body"].close()
    [call] = tracked.message.tool_calls
    assert (call.name, call.arguments, call.value) == (
        "get_weather", TOOL_ARGUMENTS, {"city": "東京 🌧", "unit": "celsius"})
    assert call.id is not None and call.id.startswith("toolu_")
    assert (tracked.message.status, tracked.message.finish_reason) == (
        Status.COMPLETED, FinishReason.TOOL_CALLS)


@pytest.mark.parametrize(("finish", "raw", "status", "reason"), [
    ("length", "max_tokens", Status.TRUNCATED, FinishReason.LENGTH),
    ("content_filter", "refusal", Status.FILTERED, FinishReason.CONTENT_FILTER),
])
def test_other_stop_reasons(bedrock: Callable[[str], Any], finish: str, raw: str,
                            status: Status, reason: FinishReason) -> None:
    response = invoke(bedrock(f"seed=4; tokens=3; finish={finish}"))
    tracked = unbroken.from_bedrock(response)
    list(tracked)
    response["body"].close()
    got = tracked.message
    assert (got.status, got.finish_reason, got.raw_finish_reason, got.text) == (
        status, reason, raw, reply_text(4, 3))


def test_boto3_raises_the_exception_and_from_bedrock_fails_the_message(
    bedrock: Callable[[str], Any],
) -> None:
    response = invoke(bedrock("tokens=3; finish=error"))
    tracked = unbroken.from_bedrock(response)
    seen = []
    with pytest.raises(EventStreamError) as caught:
        for event in tracked:
            seen.append(event)
    response["body"].close()
    assert caught.value.response["Error"]["Code"] == "modelStreamErrorException"
    assert len(seen) == 2 + 3 + 1  # start, block start, three deltas, block stop
    message = tracked.message
    assert (message.status, message.finish_reason) == (Status.FAILED, FinishReason.ERROR)
    assert isinstance(message.error, ProviderError)
    assert (message.error.event.type, message.error.retryable) == (
        "modelStreamErrorException", True)
    assert message.text == reply_text(0, 3)


def test_botocore_parser_and_ours_split_the_body_alike(mock_server: str) -> None:
    body = httpx2.post(mock_server + PATH, json=REQUEST, timeout=10,
                       headers={"Unbroken-Mock": "seed=5; tokens=6; finish=tool_calls"}).content
    theirs = botocore.eventstream.EventStreamBuffer()
    theirs.add_data(body)
    expected = [(m.headers, m.payload) for m in theirs]
    assert [(m.headers, m.payload) for m in EventStreamDecoder().receive_data(body)] == expected
    assert len(expected) == 2 + 6 + 1 + 4 + 2


def test_the_mocks_faults(mock_server: str) -> None:
    def run(scenario: str) -> Any:
        with pytest.raises((Interrupted, PayloadError)) as caught, stream(
            "POST", mock_server + PATH, dialect="bedrock-invoke", json=REQUEST,
            headers={"Unbroken-Mock": scenario}, retry=Retry(attempts=1),
        ) as s:
            for _ in s:
                pass
        return caught.value

    cut = run("seed=1; tokens=10; drop_after=5; drop_mid=1")
    assert cut.message.status is Status.INTERRUPTED
    assert cut.message.text == "".join(reply_deltas(1, 10)[:3])  # frames 3-5 are deltas 1-3
    bad = run("seed=1; tokens=10; malformed_json_at=4")
    assert isinstance(bad, PayloadError)
    assert bad.message.status is Status.FAILED
    assert "bedrock-invoke: malformed JSON in the payload" in str(bad)
    assert bad.message.text == reply_deltas(1, 10)[0]


def test_auto_tells_invoke_from_converse_by_the_first_message(mock_server: str) -> None:
    invoke_body = httpx2.post(mock_server + PATH, json=REQUEST, timeout=10,
                              headers={"Unbroken-Mock": "seed=2; tokens=4; finish=length"}).content
    converse_body = httpx2.post(f"{mock_server}/model/{MODEL}/converse-stream", timeout=10,
                                json={"messages": []},
                                headers={"Unbroken-Mock": "seed=2; tokens=4"}).content
    for body, raw in ((invoke_body, "max_tokens"), (converse_body, "end_turn")):
        message = unbroken.parse([body], dialect="auto")
        assert (message.raw_finish_reason, message.text) == (raw, reply_text(2, 4))


# -- through the proxy -----------------------------------------------------------------------

SEED, TOKENS = 6, 24


def test_boto3_through_the_proxy(mock_server: str) -> None:
    with running_proxy(mock_server) as (proxy, _):
        client = client_at(proxy, f"seed={SEED}; tokens={TOKENS}")
        try:
            response = invoke(client)
            tracked = unbroken.from_bedrock(response)
            events = list(tracked)
            response["body"].close()
        finally:
            client.close()
    headers = response["ResponseMetadata"]["HTTPHeaders"]
    assert headers["unbroken-stream-id"].startswith("ub_")
    assert len(events) == TOKENS + 5
    assert tracked.message.text == reply_text(SEED, TOKENS)
    assert tracked.message.status is Status.COMPLETED
    assert mock_counts(mock_server)["generations"] == {PATH: 1}


def test_the_post_body_is_the_upstream_messages_byte_for_byte(mock_server: str) -> None:
    scenario = {"Unbroken-Mock": f"seed={SEED}; tokens={TOKENS}"}
    direct = httpx2.post(mock_server + PATH, json=REQUEST, headers=scenario, timeout=10)
    with running_proxy(mock_server) as (proxy, _):
        proxied = httpx2.post(proxy + PATH, json=REQUEST, headers={**scenario, **KEY},
                              timeout=10)
    assert proxied.headers["content-type"] == "application/vnd.amazon.eventstream"
    assert proxied.content == direct.content


@pytest.mark.parametrize("cut_after", [300, 1500])
def test_a_cut_client_connection_resumes_from_the_journal(mock_server: str,
                                                           cut_after: int) -> None:
    log: list[str] = []
    with (
        running_proxy(mock_server) as (proxy, _),
        httpx2.Client(transport=CutOnceTransport(cut_after, log)) as http,
        stream("POST", proxy + PATH, dialect="bedrock-invoke", json=REQUEST, client=http,
               headers={**KEY, "Unbroken-Mock": f"seed={SEED}; tokens={TOKENS}"},
               retry=Retry(backoff=0.01)) as s,
    ):
        text = "".join(s.iter_text())
    assert text == reply_text(SEED, TOKENS)
    assert (s.message.status, s.message.finish_reason) == (Status.COMPLETED, FinishReason.STOP)
    assert (s.connections, s.message.duplicates) == (2, 0)
    assert log[0].startswith("network cut after")
    [resumed] = [line for line in log if line.startswith("resume:")]
    assert resumed.rsplit(" ", 1)[1].startswith("ub_")
    assert mock_counts(mock_server) == {"generations": {PATH: 1}, "resumes": {}}


def test_the_events_route_serves_the_event_stream_after_a_seq(mock_server: str) -> None:
    with running_proxy(mock_server) as (proxy, _):
        first = httpx2.post(proxy + PATH, json=REQUEST, timeout=10,
                            headers={**KEY, "Unbroken-Mock": f"seed={SEED}; tokens={TOKENS}"})
        stream_id = first.headers["unbroken-stream-id"]
        rest = httpx2.get(f"{proxy}/v1/streams/{stream_id}/events",
                          headers={**KEY, "Last-Event-ID": f"{stream_id}:4"}, timeout=10)
    assert rest.headers["content-type"].startswith("application/vnd.amazon.eventstream")
    whole = EventStreamDecoder().receive_data(first.content)
    assert len(whole) == TOKENS + 5
    assert EventStreamDecoder().receive_data(rest.content) == whole[4:]
    message = unbroken.parse([rest.content], dialect="bedrock-invoke")
    assert message.text == "".join(reply_deltas(SEED, TOKENS)[2:])  # frame 5: delta 3


def test_invoke_model_answers_whole_through_the_proxy(mock_server: str) -> None:
    with running_proxy(mock_server) as (proxy, _):
        client = client_at(proxy, "seed=3; tokens=4; finish=length")
        try:
            response = client.invoke_model(modelId=MODEL, body=json.dumps(REQUEST))
            whole = json.loads(response["body"].read())
        finally:
            client.close()
    assert "unbroken-stream-id" not in response["ResponseMetadata"]["HTTPHeaders"]
    assert (whole["type"], whole["stop_reason"], whole["content"][0]["text"]) == (
        "message", "max_tokens", reply_text(3, 4))
    assert mock_counts(mock_server)["generations"] == {f"/model/{MODEL}/invoke": 1}


def test_an_upstream_cut_ends_boto3s_stream_with_the_proxys_exception(mock_server: str) -> None:
    with running_proxy(mock_server) as (proxy, _):
        client = client_at(proxy, f"seed={SEED}; tokens={TOKENS}; drop_after=6")
        try:
            response = invoke(client)
            tracked = unbroken.from_bedrock(response)
            seen = []
            with pytest.raises(EventStreamError) as caught:
                for event in tracked:
                    seen.append(event)
            response["body"].close()
        finally:
            client.close()
    assert caught.value.response["Error"]["Code"] == "internalServerException"
    assert len(seen) == 6
    # botocore keeps an exception's "message" only, not the proxy's mark beside it: the mark
    # also ends the message, so from_bedrock reads the proxy's journaled status from it
    said = caught.value.response["Error"]["Message"]
    assert said.startswith("unbroken proxy: the upstream stream broke before it finished")
    assert said.endswith(" [unbroken: code=upstream_interrupted, status=interrupted, "
                         "resumable=false]")
    message = tracked.message
    assert (message.status, message.finish_reason) == (Status.INTERRUPTED, None)
    assert isinstance(message.error, ProxyInterrupted)
    assert (message.error.code, message.error.status) == ("upstream_interrupted", "interrupted")
    assert message.error.__cause__ is caught.value
    assert message.text == "".join(reply_deltas(SEED, TOKENS)[:4])  # frames 3-6


def test_an_upstream_cut_read_by_unbroken_is_the_proxys_interruption(mock_server: str) -> None:
    with running_proxy(mock_server) as (proxy, _):
        body = httpx2.post(proxy + PATH, json=REQUEST, timeout=10, headers={
            **KEY, "Unbroken-Mock": f"seed={SEED}; tokens={TOKENS}; drop_after=6"}).content
    message = unbroken.parse([body], dialect="auto")
    assert message.status is Status.INTERRUPTED
    assert isinstance(message.error, ProxyInterrupted)
    assert message.error.code == "upstream_interrupted"
    assert message.text == "".join(reply_deltas(SEED, TOKENS)[:4])
