"""Bedrock ConverseStream through the unbroken proxy: journaled message by message, resumed from
the journal, read by boto3 unchanged.

A Bedrock body carries no ids (a binary event stream has no place for them): the stream id is in
the ``Unbroken-Stream-Id`` header and frames are numbered by position, as for Ollama's lines.
Credentials here are a Bedrock API key (a bearer token); a SigV4 signature changes with every
request, so a SigV4 client resumes with the stream token instead.
"""

from __future__ import annotations

from typing import Any

import boto3
import botocore.config
import httpx2
import pytest
from tests.integration.test_proxy_support import mock_counts, running_proxy
from tests.normalized_reading import fold_normalized

from unbroken.cli.demo import CutOnceTransport
from unbroken.client import Retry, stream
from unbroken.finish import FinishReason, Status
from unbroken.framing import EventStreamDecoder
from unbroken.mock import reply_deltas, reply_text

pytestmark = pytest.mark.integration

MODEL = "amazon.nova-lite-v1:0"
PATH = f"/model/{MODEL}/converse-stream"
BODY: Any = {"messages": [{"role": "user", "content": [{"text": "hi"}]}]}
KEY = {"Authorization": "Bearer ABSKQmVkcm9ja0FQSUtleS1mYWtl"}
SEED, TOKENS = 6, 24


def test_boto3_through_the_proxy(mock_server: str) -> None:
    with running_proxy(mock_server) as (proxy, _):
        client = boto3.client(
            "bedrock-runtime", region_name="us-east-1", endpoint_url=proxy,
            aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="fake-secret",
            config=botocore.config.Config(retries={"max_attempts": 1}, read_timeout=10),
        )
        client.meta.events.register(
            "before-sign.bedrock-runtime.*",
            lambda request, **_: request.headers.__setitem__(
                "Unbroken-Mock", f"seed={SEED}; tokens={TOKENS}"),
        )
        try:
            response = client.converse_stream(modelId=MODEL, messages=BODY["messages"])
            events = list(response["stream"])
            response["stream"].close()
        finally:
            client.close()
    headers = response["ResponseMetadata"]["HTTPHeaders"]
    assert headers["unbroken-stream-id"].startswith("ub_")
    text = "".join(e["contentBlockDelta"]["delta"]["text"] for e in events
                   if "contentBlockDelta" in e)
    assert text == reply_text(SEED, TOKENS)
    assert events[-2] == {"messageStop": {"stopReason": "end_turn"}}
    assert mock_counts(mock_server)["generations"] == {PATH: 1}


def test_the_post_body_is_the_upstream_messages_byte_for_byte(mock_server: str) -> None:
    scenario = {"Unbroken-Mock": f"seed={SEED}; tokens={TOKENS}"}
    direct = httpx2.post(mock_server + PATH, json=BODY, headers=scenario, timeout=10)
    with running_proxy(mock_server) as (proxy, _):
        proxied = httpx2.post(proxy + PATH, json=BODY, headers={**scenario, **KEY}, timeout=10)
    assert proxied.headers["content-type"] == "application/vnd.amazon.eventstream"
    assert proxied.content == direct.content


@pytest.mark.parametrize("cut_after", [300, 1500])
def test_a_cut_client_connection_resumes_from_the_journal(mock_server: str,
                                                           cut_after: int) -> None:
    log: list[str] = []
    with (
        running_proxy(mock_server) as (proxy, _),
        httpx2.Client(transport=CutOnceTransport(cut_after, log)) as http,
        stream("POST", proxy + PATH, dialect="bedrock-converse", json=BODY, client=http,
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
        first = httpx2.post(proxy + PATH, json=BODY,
                            headers={**KEY, "Unbroken-Mock": f"seed={SEED}; tokens={TOKENS}"},
                            timeout=10)
        stream_id = first.headers["unbroken-stream-id"]
        rest = httpx2.get(f"{proxy}/v1/streams/{stream_id}/events",
                          headers={**KEY, "Last-Event-ID": f"{stream_id}:3"}, timeout=10)
    assert rest.headers["content-type"].startswith("application/vnd.amazon.eventstream")
    whole = EventStreamDecoder().receive_data(first.content)
    assert len(whole) == TOKENS + 4
    assert EventStreamDecoder().receive_data(rest.content) == whole[3:]
    assert reply_deltas(SEED, TOKENS)[2] in whole[3].payload.decode()  # frame 4: delta 3


def test_the_normalized_format_reads_a_binary_stream(mock_server: str) -> None:
    with running_proxy(mock_server) as (proxy, _):
        first = httpx2.post(proxy + PATH, json=BODY,
                            headers={**KEY, "Unbroken-Mock": f"seed={SEED}; tokens={TOKENS}"},
                            timeout=10)
        stream_id = first.headers["unbroken-stream-id"]
        normalized = httpx2.get(f"{proxy}/v1/streams/{stream_id}/events?format=unbroken",
                                headers=KEY, timeout=10)
    assert normalized.status_code == 200
    got = fold_normalized(normalized.content, stream_id)
    assert got["end"] | {"error": None} == {
        "status": "completed", "finish_reason": "stop", "raw_finish_reason": "end_turn",
        "error": None, "frames": TOKENS + 4, "chars": len(reply_text(SEED, TOKENS)),
    }
