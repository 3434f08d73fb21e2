"""Bedrock ConverseStream end to end: boto3's own client and unbroken against the mock.

boto3 is AWS's reference for the wire: the mock's event stream is what it reads without a
complaint, event for event, and botocore's own event-stream parser splits the body into the same
messages as ours. Credentials are fake (the mock checks no signature).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import boto3
import botocore.config
import botocore.eventstream
import httpx2
import pytest
from botocore.exceptions import EventStreamError

import unbroken
from unbroken.errors import Interrupted, ProviderError
from unbroken.finish import FinishReason, Status
from unbroken.framing import EventStreamDecoder
from unbroken.mock import reply_deltas, reply_text

pytestmark = pytest.mark.integration

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
MESSAGES: Any = [{"role": "user", "content": [{"text": "hi"}]}]
TOOL_ARGUMENTS = '{"city": "東京 🌧", "unit": "celsius"}'


@pytest.fixture
def bedrock(mock_server: str) -> Iterator[Callable[[str], Any]]:
    """A boto3 bedrock-runtime client at the mock; each call's scenario is given per client."""
    made_clients: list[Any] = []

    def client(scenario: str) -> Any:
        made = boto3.client(
            "bedrock-runtime", region_name="us-east-1", endpoint_url=mock_server,
            aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="fake-secret",
            config=botocore.config.Config(retries={"max_attempts": 1}, connect_timeout=5,
                                          read_timeout=10),
        )

        def add_scenario(request: Any, **_: Any) -> None:
            request.headers["Unbroken-Mock"] = scenario

        made.meta.events.register("before-sign.bedrock-runtime.*", add_scenario)
        made_clients.append(made)
        return made

    yield client
    for made in made_clients:
        made.close()


def url(mock_server: str) -> str:
    return f"{mock_server}/model/{MODEL}/converse-stream"


def test_boto3_reads_the_mock_and_from_bedrock_tracks_it(
    bedrock: Callable[[str], Any],
) -> None:
    response = bedrock("seed=3; tokens=12").converse_stream(modelId=MODEL, messages=MESSAGES)
    tracked = unbroken.from_bedrock(response)
    events = list(tracked)
    response["stream"].close()
    assert [next(iter(event)) for event in events] == [
        "messageStart", *["contentBlockDelta"] * 12, "contentBlockStop", "messageStop", "metadata"
    ]
    text = "".join(e["contentBlockDelta"]["delta"]["text"] for e in events[1:13])
    assert text == reply_text(3, 12)
    assert events[-2] == {"messageStop": {"stopReason": "end_turn"}}  # the padding is gone
    assert events[-1]["metadata"]["usage"] == {
        "inputTokens": 12, "outputTokens": 12, "totalTokens": 24
    }
    message = tracked.message
    assert (message.status, message.finish_reason, message.raw_finish_reason) == (
        Status.COMPLETED, FinishReason.STOP, "end_turn"
    )
    assert message.text == reply_text(3, 12)
    assert message.usage is not None and message.usage.output_tokens == 12


def test_boto3_tool_call(bedrock: Callable[[str], Any]) -> None:
    response = bedrock("tokens=2; finish=tool_calls").converse_stream(
        modelId=MODEL, messages=MESSAGES
    )
    tracked = unbroken.from_bedrock(response["stream"])
    events = list(tracked)
    response["stream"].close()
    assert {"contentBlockStart": {
        "start": {"toolUse": {"toolUseId": tracked.message.tool_calls[0].id,
                              "name": "get_weather"}},
        "contentBlockIndex": 1,
    }} in events
    [call] = tracked.message.tool_calls
    assert (call.name, call.arguments, call.value) == (
        "get_weather", TOOL_ARGUMENTS, {"city": "東京 🌧", "unit": "celsius"}
    )
    assert call.id is not None and call.id.startswith("tooluse_")
    assert tracked.message.finish_reason is FinishReason.TOOL_CALLS


def test_boto3_raises_the_exception_and_from_bedrock_fails_the_message(
    bedrock: Callable[[str], Any],
) -> None:
    response = bedrock("tokens=3; finish=error").converse_stream(modelId=MODEL, messages=MESSAGES)
    tracked = unbroken.from_bedrock(response)
    seen = []
    with pytest.raises(EventStreamError) as caught:
        for event in tracked:
            seen.append(event)
    response["stream"].close()  # the socket goes back now, not when the collector finds it
    assert caught.value.response["Error"]["Code"] == "modelStreamErrorException"
    assert len(seen) == 1 + 3 + 1  # start, three deltas, block stop
    message = tracked.message
    assert (message.status, message.finish_reason) == (Status.FAILED, FinishReason.ERROR)
    assert isinstance(message.error, ProviderError)
    assert message.error.event.type == "modelStreamErrorException"
    assert message.error.retryable is True
    assert message.text == reply_text(0, 3)


def test_botocore_parser_and_ours_split_the_body_alike(mock_server: str) -> None:
    body = httpx2.post(url(mock_server), json={"messages": MESSAGES},
                       headers={"Unbroken-Mock": "seed=5; tokens=6; finish=tool_calls"},
                       timeout=10).content
    theirs = botocore.eventstream.EventStreamBuffer()
    theirs.add_data(body)
    ours = EventStreamDecoder()
    mine = ours.receive_data(body)
    expected = [(m.headers, m.payload) for m in theirs]
    assert [(m.headers, m.payload) for m in mine] == expected
    assert len(expected) == 1 + 6 + 1 + 4 + 2


def test_unbroken_stream_keeps_whole_characters_across_split_messages(mock_server: str) -> None:
    with unbroken.stream("POST", url(mock_server), dialect="bedrock-converse",
                         json={"messages": MESSAGES},
                         headers={"Unbroken-Mock": "seed=8; tokens=20; split_utf8=1"}) as s:
        deltas = [event.text for event in s if isinstance(event, unbroken.TextDelta)]
    assert deltas == reply_deltas(8, 20)
    assert s.message.status is Status.COMPLETED


def test_a_body_cut_inside_a_message_is_interrupted_with_its_bytes_as_evidence(
    mock_server: str,
) -> None:
    with pytest.raises(Interrupted) as caught, unbroken.stream(
        "POST", url(mock_server), dialect="bedrock-converse", json={"messages": MESSAGES},
        headers={"Unbroken-Mock": "seed=1; tokens=10; drop_after=4; drop_mid=1"},
        retry=unbroken.Retry(attempts=1),
    ) as s:
        for _ in s:
            pass
    message = caught.value.message
    assert message.status is Status.INTERRUPTED
    assert message.text == "".join(reply_deltas(1, 10)[:3])  # frames 2-4 are deltas 1-3
    assert message.last_seq == 4
    kinds = [warning.code for warning in message.trace.warnings]
    assert "unterminated_tail" in kinds and "truncated_utf8" not in kinds


def test_auto_detects_bedrock_from_the_first_byte(mock_server: str) -> None:
    body = httpx2.post(url(mock_server), json={"messages": MESSAGES},
                       headers={"Unbroken-Mock": "seed=2; tokens=4; finish=length"},
                       timeout=10).content
    message = unbroken.parse([body], dialect="auto")
    assert (message.status, message.raw_finish_reason, message.text) == (
        Status.TRUNCATED, "max_tokens", reply_text(2, 4)
    )


def test_the_mock_refuses_sse_ids_for_an_event_stream(mock_server: str) -> None:
    response = httpx2.post(url(mock_server), json={"messages": MESSAGES},
                           headers={"Unbroken-Mock": "sse_ids=1"}, timeout=10)
    assert response.status_code == 400
    assert response.json() == {
        "message": "bad scenario key 'sse_ids': bedrock-converse is not an SSE stream"
    }
