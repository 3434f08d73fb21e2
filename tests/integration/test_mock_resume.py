"""Resumes: ``sse_ids`` with ``Last-Event-ID``, and background Responses with ``starting_after``."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

from unbroken.mock import reply_text

pytestmark = pytest.mark.integration

SSE_PATHS = {
    "openai-chat": ("/v1/chat/completions", b"\n\n"),
    "openai-responses": ("/v1/responses", b"\n\n"),
    "anthropic": ("/v1/messages", b"\n\n"),
    "gemini": ("/v1beta/models/g:streamGenerateContent?alt=sse", b"\r\n\r\n"),
}
BODY = b'{"stream": true}'


def frames_of(body: bytes, separator: bytes) -> list[bytes]:
    parts = body.split(separator)
    assert parts[-1] == b""
    return [part + separator for part in parts[:-1]]


def stream(client: httpx2.Client, path: str, scenario: str, *, method: str = "POST",
           last_event_id: str | None = None, content: bytes | None = BODY) -> bytes:
    headers = {"Unbroken-Mock": scenario}
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    response = client.request(method, path, content=content, headers=headers)
    assert response.status_code == 200
    return response.content


def counts(client: httpx2.Client) -> Any:
    return client.get("/_mock/requests").json()


@pytest.mark.parametrize("name", list(SSE_PATHS))
def test_sse_ids_number_the_frames_and_last_event_id_resumes(mock_server: str,
                                                             name: str) -> None:
    path, separator = SSE_PATHS[name]
    eol = separator[: len(separator) // 2]
    scenario = "tokens=4; sse_ids=1; drop_after=3"
    with httpx2.Client(base_url=mock_server, timeout=10) as client:
        with pytest.raises(httpx2.RemoteProtocolError):
            stream(client, path, scenario)
        plain = frames_of(stream(client, path, "tokens=4"), separator)
        # A resume after frame 3 is not dropped again (drop_after is for the first connection).
        resumed = frames_of(stream(client, path, scenario, last_event_id="3"), separator)
        assert [frame.split(eol, 1)[0] for frame in resumed] == [
            b"id: %d" % number for number in range(4, len(plain) + 1)
        ]
        assert [frame.split(eol, 1)[1] for frame in resumed] == plain[3:]
        assert stream(client, path, scenario, last_event_id=str(len(plain))) == b""
        assert counts(client) == {"generations": {path.partition("?")[0]: 2},
                                  "resumes": {path.partition("?")[0]: 2}}


def test_last_event_id_is_ignored_without_sse_ids(mock_server: str) -> None:
    with httpx2.Client(base_url=mock_server, timeout=10) as client:
        whole = stream(client, "/v1/messages", "tokens=2")
        assert stream(client, "/v1/messages", "tokens=2", last_event_id="3") == whole
        assert counts(client) == {"generations": {"/v1/messages": 2}, "resumes": {}}


def _payloads(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(frame.split(b"data: ", 1)[1]) for frame in frames_of(body, b"\n\n")]


def test_background_response_resumes_after_a_sequence_number(mock_server: str) -> None:
    request = json.dumps({"model": "gpt-mock", "stream": True, "background": True}).encode()
    with httpx2.Client(base_url=mock_server, timeout=10) as client:
        received = b""
        with client.stream("POST", "/v1/responses", content=request,
                           headers={"Unbroken-Mock": "seed=5; tokens=4; drop_after=6"}) as first:
            with pytest.raises(httpx2.RemoteProtocolError):
                for chunk in first.iter_raw():
                    received += chunk
        before = _payloads(received)
        assert [event["sequence_number"] for event in before] == [0, 1, 2, 3, 4, 5]
        response_id = before[0]["response"]["id"]
        assert before[0]["response"]["background"] is True
        # The stored response streams again after sequence number 5, and is not dropped again.
        resume = f"/v1/responses/{response_id}?stream=true&starting_after=5"
        after = _payloads(stream(client, resume, "", method="GET", content=None))
        assert [event["sequence_number"] for event in after] == [6, 7, 8, 9, 10, 11]
        text = "".join(event["delta"] for event in before + after
                       if event["type"] == "response.output_text.delta")
        assert text == reply_text(5, 4)
        assert after[-1]["type"] == "response.completed"
        # From the start, and as a whole body.
        again = _payloads(stream(client, f"/v1/responses/{response_id}?stream=true", "",
                                 method="GET", content=None))
        assert again == before + after
        whole = client.get(f"/v1/responses/{response_id}").json()
        assert whole["status"] == "completed"
        assert whole["output"][0]["content"][0]["text"] == reply_text(5, 4)
        assert counts(client) == {"generations": {"/v1/responses": 1},
                                  "resumes": {"/v1/responses": 2}}


def test_background_without_stream_is_queued_then_retrievable(mock_server: str) -> None:
    with httpx2.Client(base_url=mock_server, timeout=10) as client:
        queued = client.post("/v1/responses", json={"background": True},
                             headers={"Unbroken-Mock": "tokens=3; finish=length"}).json()
        assert queued["status"] == "queued"
        assert queued["output"] == []
        final = client.get(f"/v1/responses/{queued['id']}").json()
        assert final["status"] == "incomplete"
        assert final["incomplete_details"] == {"reason": "max_output_tokens"}
        assert final["id"] == queued["id"]
        other = client.post("/v1/responses", json={"background": True}).json()
        assert other["id"] != queued["id"]
        bad = client.get(f"/v1/responses/{queued['id']}?stream=true&starting_after=x")
        assert bad.status_code == 400
        assert counts(client) == {"generations": {"/v1/responses": 2}, "resumes": {}}


def test_background_resume_replays_a_duplicate(mock_server: str) -> None:
    request = json.dumps({"stream": True, "background": True}).encode()
    with httpx2.Client(base_url=mock_server, timeout=10) as client:
        first = _payloads(stream(client, "/v1/responses", "tokens=2; duplicate=7",
                                 content=request))
        numbers = [event["sequence_number"] for event in first]
        assert numbers == [0, 1, 2, 3, 4, 5, 6, 6, 7, 8, 9]
        response_id = first[0]["response"]["id"]
        resume = f"/v1/responses/{response_id}?stream=true&starting_after=5"
        after = _payloads(stream(client, resume, "", method="GET", content=None))
        assert [event["sequence_number"] for event in after] == [6, 6, 7, 8, 9]
