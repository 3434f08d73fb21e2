"""A Responses background stream that breaks upstream is continued by the proxy itself
(``starting_after``): the client sees one seamless stream, one generation, one upstream resume."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import openai
import pytest
from tests.integration.test_proxy_support import (
    CALLS,
    KEY,
    frames_of,
    message_of,
    mock_counts,
    running_proxy,
    stream_status,
)

from unbroken.finish import Status
from unbroken.mock import reply_text

pytestmark = pytest.mark.integration

SEED, TOKENS = 11, 15
BODY = {"model": "m", "stream": True, "input": "hi", "background": True}


@pytest.fixture(scope="module")
def proxy(mock_server_session: str) -> Iterator[str]:
    with running_proxy(mock_server_session) as (base_url, _app):
        yield base_url


@pytest.mark.parametrize("scenario", ["drop_after=9", "drop_after=9; drop_mid=1",
                                      "drop_after=1", "duplicate=6; drop_after=9"])
def test_background_drop_is_seamless_raw(proxy: str, mock_server: str, scenario: str) -> None:
    headers = CALLS["openai-responses"].headers(f"seed={SEED}; tokens={TOKENS}; {scenario}")
    response = httpx2.post(proxy + "/v1/responses", json=BODY, headers=headers, timeout=10)
    assert response.status_code == 200
    stream_id = response.headers["unbroken-stream-id"]
    events = frames_of("openai-responses", response.content)
    total = CALLS["openai-responses"].total(TOKENS)
    # Proxy seqs 1..total without a gap or a repeat, and the provider's numbers 0..total-1.
    assert [event.id for event in events] == [f"{stream_id}:{n}" for n in range(1, total + 1)]
    numbers = [int(event.data.split('"sequence_number":')[1].split(",")[0].rstrip("}"))
               for event in events]
    assert numbers == list(range(total))
    message = message_of("openai-responses", response.content)
    assert (message.status, message.text) == (Status.COMPLETED, reply_text(SEED, TOKENS))
    assert message.duplicates == 0
    status = stream_status(proxy, stream_id)
    assert (status["status"], status["upstream_requests"], status["text"]) == (
        "completed", 2, reply_text(SEED, TOKENS)
    )
    assert status["provider_id"].startswith("resp_")
    assert mock_counts(mock_server) == {
        "generations": {"/v1/responses": 1}, "resumes": {"/v1/responses": 1}
    }


def test_background_drop_is_seamless_for_the_openai_sdk(proxy: str, mock_server: str) -> None:
    scenario = f"seed={SEED}; tokens={TOKENS}; drop_after=12; drop_mid=1"
    with openai.OpenAI(base_url=proxy + "/v1", api_key=KEY, max_retries=0) as client:
        events = list(client.responses.create(
            model="m", input="hi", stream=True, background=True,
            extra_headers={"Unbroken-Mock": scenario},
        ))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == reply_text(SEED, TOKENS)
    assert events[-1].type == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert mock_counts(mock_server) == {
        "generations": {"/v1/responses": 1}, "resumes": {"/v1/responses": 1}
    }


def test_a_foreground_responses_drop_is_not_resumed_upstream(
    proxy: str, mock_server: str
) -> None:
    body = dict(BODY, background=False)
    headers = CALLS["openai-responses"].headers(f"seed={SEED}; tokens={TOKENS}; drop_after=9")
    response = httpx2.post(proxy + "/v1/responses", json=body, headers=headers, timeout=10)
    events = frames_of("openai-responses", response.content)
    assert len(events) == 10
    assert events[-1].event == "error"
    assert '"sequence_number":9' in events[-1].data
    status = stream_status(proxy, response.headers["unbroken-stream-id"])
    assert (status["status"], status["upstream_requests"]) == ("interrupted", 1)
    assert mock_counts(mock_server) == {"generations": {"/v1/responses": 1}, "resumes": {}}
