"""The mock's wire formats over a real server: frame layouts, whole bodies, errors, counts."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest

from unbroken.mock import reply_deltas, reply_text

pytestmark = pytest.mark.integration

TOOL_ARGUMENTS = '{"city": "東京 🌧", "unit": "celsius"}'


@dataclass(frozen=True)
class Wire:
    path: str
    body: dict[str, Any]
    separator: bytes
    media_type: str
    first_text: int  # frame number of the first text frame
    text_of: Callable[[dict[str, Any]], str]
    totals: dict[str, int]  # finish -> frames, for T = 0 (add T)


def _sse_fields(frame: bytes) -> dict[str, str]:
    fields = {}
    for line in frame.decode().splitlines():
        if line:
            name, _, value = line.partition(": ")
            fields[name] = value
    return fields


WIRES = {
    "openai-chat": Wire(
        "/v1/chat/completions", {"model": "gpt-mock", "stream": True}, b"\n\n",
        "text/event-stream; charset=utf-8", 2,
        lambda data: data["choices"][0]["delta"]["content"],
        {"stop": 3, "length": 3, "content_filter": 3, "tool_calls": 6, "error": 2},
    ),
    "openai-responses": Wire(
        "/v1/responses", {"model": "gpt-mock", "stream": True}, b"\n\n",
        "text/event-stream; charset=utf-8", 5, lambda data: data["delta"],
        {"stop": 8, "length": 8, "content_filter": 8, "tool_calls": 13, "error": 8},
    ),
    "anthropic": Wire(
        "/v1/messages", {"model": "claude-mock", "stream": True, "max_tokens": 100}, b"\n\n",
        "text/event-stream; charset=utf-8", 4, lambda data: data["delta"]["text"],
        {"stop": 6, "length": 6, "content_filter": 6, "tool_calls": 10, "error": 5},
    ),
    "gemini": Wire(
        "/v1beta/models/gemini-mock:streamGenerateContent?alt=sse", {}, b"\r\n\r\n",
        "text/event-stream", 1, lambda data: data["candidates"][0]["content"]["parts"][0]["text"],
        {"stop": 1, "length": 1, "content_filter": 1, "tool_calls": 1, "error": 1},
    ),
    "ollama": Wire(
        "/api/chat", {"model": "llama-mock"}, b"\n", "application/x-ndjson", 1,
        lambda data: data["message"]["content"],
        {"stop": 1, "length": 1, "tool_calls": 2, "error": 1},
    ),
}
CASES = [(name, finish) for name, wire in WIRES.items() for finish in wire.totals]


def split_frames(body: bytes, separator: bytes) -> list[bytes]:
    frames = [piece + separator for piece in body.split(separator)]
    assert frames[-1] == separator  # the body ends with a complete frame
    return frames[:-1]


def payload(frame: bytes, wire: Wire) -> Any:
    data = frame if wire.separator == b"\n" else _sse_fields(frame)["data"].encode()
    return json.loads(data)


def post(base_url: str, wire: Wire, scenario: str, **body: Any) -> httpx2.Response:
    return httpx2.post(base_url + wire.path, json={**wire.body, **body},
                       headers={"Unbroken-Mock": scenario}, timeout=10)


def counts(base_url: str) -> Any:
    return httpx2.get(base_url + "/_mock/requests", timeout=5).json()


@pytest.mark.parametrize(("name", "finish"), CASES)
def test_stream_layout(mock_server: str, name: str, finish: str) -> None:
    wire, tokens = WIRES[name], 5
    response = post(mock_server, wire, f"seed=3; tokens={tokens}; finish={finish}")
    assert response.status_code == 200
    assert response.headers["content-type"] == wire.media_type
    frames = split_frames(response.content, wire.separator)
    assert len(frames) == wire.totals[finish] + tokens
    texts = [
        wire.text_of(payload(frame, wire))
        for frame in frames[wire.first_text - 1 : wire.first_text - 1 + tokens]
    ]
    assert texts == reply_deltas(3, tokens)
    assert "".join(texts) == reply_text(3, tokens)
    last = frames[-1]
    if name == "openai-chat":
        assert last == (b"data: [DONE]\n\n" if finish != "error" else last)
        end = payload(frames[-1 if finish == "error" else -2], wire)
        if finish == "error":
            assert end["error"]["code"] == "server_error"
        else:
            assert end["choices"][0]["finish_reason"] == finish
    elif name == "openai-responses":
        events = [_sse_fields(frame)["event"] for frame in frames]
        assert [payload(frame, wire)["sequence_number"] for frame in frames] == list(
            range(len(frames))
        )
        assert events[:4] == [
            "response.created", "response.in_progress", "response.output_item.added",
            "response.content_part.added",
        ]
        terminal = {"stop": "response.completed", "tool_calls": "response.completed",
                    "length": "response.incomplete", "content_filter": "response.incomplete",
                    "error": "response.failed"}[finish]
        assert events[-1] == terminal
        final = payload(last, wire)["response"]
        assert final["output"][0]["content"][0]["text"] == reply_text(3, tokens)
        if finish in ("length", "content_filter"):
            reason = "max_output_tokens" if finish == "length" else "content_filter"
            assert final["incomplete_details"] == {"reason": reason}
    elif name == "anthropic":
        events = [_sse_fields(frame)["event"] for frame in frames]
        assert events[:3] == ["message_start", "content_block_start", "ping"]
        if finish == "error":
            assert payload(last, wire)["error"]["type"] == "overloaded_error"
        else:
            assert events[-2:] == ["message_delta", "message_stop"]
            stop = {"stop": "end_turn", "length": "max_tokens", "content_filter": "refusal",
                    "tool_calls": "tool_use"}[finish]
            assert payload(frames[-2], wire)["delta"]["stop_reason"] == stop
    elif name == "gemini":
        reason = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS",
                  "content_filter": "SAFETY", "error": "MALFORMED_FUNCTION_CALL"}[finish]
        candidate = payload(last, wire)["candidates"][0]
        assert candidate["finishReason"] == reason
        assert all(b"finishReason" not in frame for frame in frames[:-1])
    else:
        final = payload(last, wire)
        if finish == "error":
            assert set(final) == {"error"}
        else:
            assert final["done"] is True
            assert final["done_reason"] == {"stop": "stop", "length": "length",
                                            "tool_calls": "stop"}[finish]


def test_chat_usage_chunk_only_when_asked(mock_server: str) -> None:
    wire = WIRES["openai-chat"]
    response = post(mock_server, wire, "tokens=2", stream_options={"include_usage": True})
    frames = split_frames(response.content, wire.separator)
    assert len(frames) == 6
    usage = payload(frames[-2], wire)
    assert usage["choices"] == []
    assert usage["usage"]["prompt_tokens"] == 12
    assert usage["usage"]["completion_tokens"] == 2
    assert usage["usage"]["total_tokens"] == 14


@pytest.mark.parametrize("name", ["openai-chat", "openai-responses", "anthropic"])
def test_tool_call_arguments_stream_in_two_deltas(mock_server: str, name: str) -> None:
    wire = WIRES[name]
    frames = split_frames(post(mock_server, wire, "tokens=2; finish=tool_calls").content,
                          wire.separator)
    datas = [payload(frame, wire) for frame in frames if not frame.endswith(b"[DONE]\n\n")]
    if name == "openai-chat":
        calls = [data["choices"][0]["delta"]["tool_calls"][0] for data in datas[3:6]]
        assert calls[0]["function"]["name"] == "get_weather"
        pieces = [call["function"]["arguments"] for call in calls]
    elif name == "openai-responses":
        pieces = [data["delta"] for data in datas[10:12]]
    else:
        pieces = [data["delta"]["partial_json"] for data in datas[7:9]]
    assert "".join(pieces) == TOOL_ARGUMENTS


def test_gemini_sends_crlf_and_a_json_array_without_alt_sse(mock_server: str) -> None:
    wire = WIRES["gemini"]
    body = post(mock_server, wire, "tokens=3").content
    assert body.count(b"\r\n\r\n") == 4
    assert b"\n\n" not in body.replace(b"\r\n", b"")
    array = httpx2.post(mock_server + "/v1beta/models/g:streamGenerateContent", json={},
                        headers={"Unbroken-Mock": "tokens=3"}, timeout=5)
    assert array.headers["content-type"] == "application/json"
    chunks = array.json()
    assert len(chunks) == 4
    assert "".join(chunk["candidates"][0]["content"]["parts"][0]["text"]
                   for chunk in chunks) == reply_text(0, 3)


def test_ollama_escapes_html_characters_as_go_does(mock_server: str) -> None:
    seed = next(seed for seed in range(50) if "&" in reply_text(seed, 20))
    body = post(mock_server, WIRES["ollama"], f"seed={seed}; tokens=20").content
    assert b"&" not in body
    assert b"\\u0026" in body
    lines = split_frames(body, b"\n")
    assert "".join(json.loads(line)["message"]["content"] for line in lines) == reply_text(seed, 20)


WHOLE = {
    "openai-chat": lambda body: (body["choices"][0]["message"]["content"],
                                 body["choices"][0]["finish_reason"]),
    "openai-responses": lambda body: (body["output"][0]["content"][0]["text"], body["status"]),
    "anthropic": lambda body: (body["content"][0]["text"], body["stop_reason"]),
    "gemini": lambda body: (body["candidates"][0]["content"]["parts"][0]["text"],
                            body["candidates"][0]["finishReason"]),
    "ollama": lambda body: (body["message"]["content"], body["done_reason"]),
}


@pytest.mark.parametrize(
    ("name", "finish", "expected"),
    [
        ("openai-chat", "length", "length"),
        ("openai-responses", "content_filter", "incomplete"),
        ("anthropic", "stop", "end_turn"),
        ("gemini", "length", "MAX_TOKENS"),
        ("ollama", "stop", "stop"),
    ],
)
def test_whole_bodies(mock_server: str, name: str, finish: str, expected: str) -> None:
    path = WIRES[name].path
    if name == "gemini":
        path = "/v1beta/models/gemini-mock:generateContent"
    body = {**WIRES[name].body, "stream": False}
    response = httpx2.post(mock_server + path, json=body, timeout=5,
                           headers={"Unbroken-Mock": f"seed=9; tokens=7; finish={finish}"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert WHOLE[name](response.json()) == (reply_text(9, 7), expected)
    assert counts(mock_server) == {"generations": {path: 1}, "resumes": {}}


@pytest.mark.parametrize(
    ("name", "status", "check"),
    [
        ("openai-chat", 500, lambda body: body["error"]["code"] == "server_error"),
        ("anthropic", 529, lambda body: body["error"]["type"] == "overloaded_error"),
        ("ollama", 500, lambda body: "error" in body),
        ("openai-responses", 200, lambda body: body["status"] == "failed"),
    ],
)
def test_whole_body_errors(mock_server: str, name: str, status: int,
                           check: Callable[[Any], bool]) -> None:
    response = post(mock_server, WIRES[name], "finish=error", stream=False)
    assert response.status_code == status
    assert check(response.json())


@pytest.mark.parametrize("name", list(WIRES))
def test_status_fault_then_success(mock_server: str, name: str) -> None:
    wire = WIRES[name]
    scenario = "tokens=2; status=429; status_times=2; retry_after=0"
    for _ in range(2):
        refused = post(mock_server, wire, scenario)
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "0"
        assert refused.headers["retry-after-ms"] == "0"
        error = refused.json()
        assert "mock status 429" in json.dumps(error)
    assert post(mock_server, wire, scenario).status_code == 200
    path = wire.path.partition("?")[0]
    assert counts(mock_server) == {"generations": {path: 1}, "resumes": {}}


def test_status_fault_formats_and_defaults(mock_server: str) -> None:
    chat = post(mock_server, WIRES["openai-chat"], "status=429")
    assert chat.headers["retry-after"] == "1"
    assert chat.headers["retry-after-ms"] == "1000"
    assert chat.json()["error"]["code"] == "rate_limit_exceeded"
    anthropic = post(mock_server, WIRES["anthropic"], "status=500")
    assert anthropic.status_code == 500
    assert "retry-after" not in anthropic.headers
    assert anthropic.json() == {"type": "error", "error": {"type": "api_error",
                                                           "message": "mock status 500"}}
    gemini = post(mock_server, WIRES["gemini"], "status=503")
    assert gemini.json() == {"error": {"code": 503, "message": "mock status 503",
                                       "status": "UNAVAILABLE"}}
    assert post(mock_server, WIRES["ollama"], "status=503; retry_after=2.5").headers[
        "retry-after"] == "3"
    # Without status_times every request is refused; counts are per scenario string and path.
    for _ in range(3):
        assert post(mock_server, WIRES["gemini"], "status=503").status_code == 503
    assert post(mock_server, WIRES["gemini"], "status=503;").status_code == 503
    assert counts(mock_server) == {"generations": {}, "resumes": {}}


@pytest.mark.parametrize(
    ("name", "scenario", "key"),
    [
        ("openai-chat", "nope=1", "nope"),
        ("anthropic", "tokens=abc", "tokens"),
        ("ollama", "finish=content_filter", "finish"),
        ("ollama", "sse_ids=1", "sse_ids"),
        ("openai-chat", "duplicate=2", "duplicate"),
        ("gemini", "tokens=3; error_at=5", "error_at"),
        ("openai-chat", "tokens=3; drop_after=7", "drop_after"),
        ("openai-chat", "tokens=3; drop_after=6; drop_mid=1", "drop_mid"),
        ("openai-responses", "tokens=3; stall_after=12", "stall_after"),
    ],
)
def test_bad_scenarios_are_400_naming_the_key(mock_server: str, name: str, scenario: str,
                                              key: str) -> None:
    response = post(mock_server, WIRES[name], scenario)
    assert response.status_code == 400
    assert f"bad scenario key {key!r}" in response.text
    assert counts(mock_server) == {"generations": {}, "resumes": {}}


def test_bad_bodies_and_paths(mock_server: str) -> None:
    not_json = httpx2.post(mock_server + "/v1/messages", content=b"{", timeout=5)
    assert not_json.status_code == 400
    assert not_json.json()["error"]["message"] == "request body is not JSON"
    bad_id = httpx2.post(mock_server + "/v1/chat/completions", json={"stream": True}, timeout=5,
                         headers={"Unbroken-Mock": "sse_ids=1", "Last-Event-ID": "x"})
    assert bad_id.status_code == 400
    assert httpx2.post(mock_server + "/v1/nothing", json={}, timeout=5).status_code == 404
    gemini = httpx2.post(mock_server + "/v1beta/models/g:countTokens", json={}, timeout=5)
    assert gemini.status_code == 404
    assert httpx2.get(mock_server + "/v1/responses/resp_none", timeout=5).status_code == 404


def test_scenario_as_query_parameter_and_counts(mock_server: str) -> None:
    wire = WIRES["ollama"]
    response = httpx2.post(mock_server + "/api/chat", params={"mock": "tokens=2; seed=4"},
                           json={}, timeout=5)
    lines = split_frames(response.content, b"\n")
    assert "".join(json.loads(line)["message"]["content"] for line in lines[:2]) == reply_text(
        4, 2)
    post(mock_server, WIRES["openai-chat"], "tokens=1")
    post(mock_server, WIRES["openai-chat"], "tokens=1", stream=False)
    post(mock_server, wire, "tokens=1")
    assert counts(mock_server) == {
        "generations": {"/api/chat": 2, "/v1/chat/completions": 2},
        "resumes": {},
    }
    reset = httpx2.post(mock_server + "/_mock/reset", timeout=5)
    assert reset.json() == {"generations": {}, "resumes": {}}
    assert counts(mock_server) == {"generations": {}, "resumes": {}}


def test_same_request_same_bytes(mock_server: str) -> None:
    wire = WIRES["openai-responses"]
    first = post(mock_server, wire, "seed=2; tokens=4").content
    assert post(mock_server, wire, "tokens=4; seed=2").content == first
    assert post(mock_server, wire, "seed=3; tokens=4").content != first
