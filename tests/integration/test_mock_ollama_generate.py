"""The mock's ``POST /api/generate``: Ollama's wire format, byte for byte, and every fault its
``/api/chat`` has.

The expected lines are written here from Ollama's API reference (docs/api.md, "Generate a
completion") and its Go struct ``api.GenerateResponse`` (field order: model, created_at,
response, done, done_reason, context, then the metrics), not from the mock's own code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import httpx2
import pytest
from tests.integration.test_mock_connection import RawResponse, raw_post
from tests.integration.test_proxy_support import mock_counts

from unbroken.mock import reply_deltas, reply_text

pytestmark = pytest.mark.integration

PATH = "/api/generate"
BODY = {"model": "llama-mock", "prompt": "Why is the sky blue?"}
SEED, TOKENS = 5, 3
RUNNER_ERROR = b'{"error":"an error was encountered while running the model: unexpected EOF"}\n'
METRICS = (b'"total_duration":5000000,"load_duration":1000000,"prompt_eval_count":12,'
           b'"prompt_eval_duration":1000000,"eval_count":%d,"eval_duration":3000000')


def go_string(text: str) -> bytes:
    """A JSON string as Go's encoding/json writes it: UTF-8 raw, ``< > &`` escaped."""
    encoded = json.dumps(text, ensure_ascii=False)
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        encoded = encoded.replace(char, escape)
    return encoded.encode()


def head(number: int) -> bytes:
    return b'{"model":"llama-mock","created_at":"2025-01-01T00:00:00.%09dZ"' % number


def done_line(number: int, text: str, reason: bytes, tokens: int) -> bytes:
    return (head(number) + b',"response":' + go_string(text) + b',"done":true,"done_reason":"'
            + reason + b'","context":[1,2,3],' + METRICS % tokens + b"}")


def expected_lines(seed: int, tokens: int, reason: bytes = b"stop") -> list[bytes]:
    deltas = reply_deltas(seed, tokens)
    lines = [head(number) + b',"response":' + go_string(delta) + b',"done":false}\n'
             for number, delta in enumerate(deltas, start=1)]
    return [*lines, done_line(tokens + 1, "", reason, tokens) + b"\n"]


def post(mock: str, scenario: str, body: Mapping[str, object] = BODY) -> httpx2.Response:
    return httpx2.post(mock + PATH, json=body, headers={"Unbroken-Mock": scenario}, timeout=10)


@pytest.mark.parametrize("stream", [None, True], ids=["default", "stream-true"])
def test_a_generate_stream_is_ollamas_ndjson(mock_server: str, stream: bool | None) -> None:
    body = BODY if stream is None else {**BODY, "stream": stream}
    response = post(mock_server, f"seed={SEED}; tokens={TOKENS}", body)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-ndjson"
    assert response.content == b"".join(expected_lines(SEED, TOKENS))
    assert mock_counts(mock_server) == {"generations": {PATH: 1}, "resumes": {}}


def test_length_and_error_end_the_stream_as_ollama_does(mock_server: str) -> None:
    truncated = post(mock_server, f"seed={SEED}; tokens={TOKENS}; finish=length")
    assert truncated.content == b"".join(expected_lines(SEED, TOKENS, b"length"))
    failed = post(mock_server, f"seed={SEED}; tokens={TOKENS}; finish=error")
    assert failed.status_code == 200  # Ollama reports a runner error in the body
    assert failed.content == b"".join(expected_lines(SEED, TOKENS)[:TOKENS]) + RUNNER_ERROR
    assert mock_counts(mock_server)["generations"] == {PATH: 2}


def test_stream_false_answers_one_json_object(mock_server: str) -> None:
    response = post(mock_server, f"seed={SEED}; tokens={TOKENS}", {**BODY, "stream": False})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.content == done_line(1, reply_text(SEED, TOKENS), b"stop", TOKENS)
    failed = post(mock_server, "finish=error", {**BODY, "stream": False})
    assert (failed.status_code, failed.json()) == (
        500, {"error": "an error was encountered while running the model: unexpected EOF"}
    )
    assert mock_counts(mock_server)["generations"] == {PATH: 2}


@pytest.mark.parametrize(
    ("scenario", "message"),
    [
        ("finish=tool_calls", "bad scenario key 'finish': ollama /api/generate cannot express "
                              "tool_calls"),
        ("finish=content_filter", "bad scenario key 'finish': ollama /api/generate cannot "
                                  "express content_filter"),
        ("sse_ids=1", "bad scenario key 'sse_ids': ollama /api/generate is not an SSE stream"),
        ("tokens=3; error_at=5", "bad scenario key 'error_at': frame 5 is past the last frame "
                                 "(4)"),
    ],
)
def test_what_generate_cannot_do_is_a_400(mock_server: str, scenario: str, message: str) -> None:
    response = post(mock_server, scenario)
    assert (response.status_code, response.json()) == (400, {"error": message})
    assert mock_counts(mock_server)["generations"] == {}


def test_data_faults_damage_the_documented_lines(mock_server: str) -> None:
    clean = expected_lines(SEED, TOKENS)
    scenario = f"seed={SEED}; tokens={TOKENS}"
    assert post(mock_server, f"{scenario}; error_at=2").content == clean[0] + RUNNER_ERROR
    # The closing brace of line 2 is gone; its LF stays.
    assert post(mock_server, f"{scenario}; malformed_json_at=2").content == b"".join(
        [clean[0], clean[1][:-2] + b"\n", *clean[2:]]
    )
    # Line 1's first multi-byte character becomes the byte 0xFF.
    first = next(char for char in reply_deltas(SEED, TOKENS)[0] if ord(char) > 0x7F)
    damaged = clean[0].replace(first.encode(), b"\xff", 1)
    assert post(mock_server, f"{scenario}; invalid_utf8_at=1").content == b"".join(
        [damaged, *clean[1:]]
    )


def raw_generate(mock: str, scenario: str) -> RawResponse:
    return raw_post(mock, PATH, scenario, body=json.dumps(BODY).encode())


def test_connection_faults_cut_and_split_the_lines(mock_server: str) -> None:
    clean = expected_lines(SEED, TOKENS)
    scenario = f"seed={SEED}; tokens={TOKENS}"
    dropped = raw_generate(mock_server, f"{scenario}; drop_after=2")
    assert (dropped.terminated, dropped.body) == (False, b"".join(clean[:2]))
    mid = raw_generate(mock_server, f"{scenario}; drop_after=2; drop_mid=1")
    lead = next(index for index, byte in enumerate(clean[2]) if byte >= 0xC0)
    assert (mid.terminated, mid.body) == (False, b"".join(clean[:2]) + clean[2][: lead + 1])
    split = raw_generate(mock_server, f"{scenario}; split_utf8=1")
    assert (split.terminated, split.body) == (True, b"".join(clean))
    assert len(split.chunks) >= 2 * len(clean)  # every line is cut at least once
    # Ollama has no keep-alive: pings add nothing; a stall only pauses.
    for slow in ("pings=1; delay_ms=2", "stall_after=1; stall_s=0.05", "stall_after=0; "
                 "stall_s=0.05; pings=1; ping_ms=10"):
        response = raw_generate(mock_server, f"{scenario}; {slow}")
        assert (response.terminated, response.chunks) == (True, clean), slow
    assert mock_counts(mock_server)["generations"] == {PATH: 6}


def test_status_faults_answer_ollamas_error_object(mock_server: str) -> None:
    limited = post(mock_server, "status=429")
    assert (limited.status_code, limited.json()) == (429, {"error": "mock status 429"})
    assert (limited.headers["retry-after"], limited.headers["retry-after-ms"]) == ("1", "1000")
    scenario = f"seed={SEED}; tokens={TOKENS}; status=503; status_times=1"
    assert post(mock_server, scenario).status_code == 503
    again = post(mock_server, scenario)
    assert (again.status_code, again.content) == (200, b"".join(expected_lines(SEED, TOKENS)))
    assert mock_counts(mock_server) == {"generations": {PATH: 1}, "resumes": {}}


@pytest.mark.parametrize("faults", [
    "", "error_at=3", "malformed_json_at=2", "finish=length", "finish=error", "drop_after=2",
    "drop_after=2; drop_mid=1", "drop_after=0", "split_utf8=1", "stall_after=2; stall_s=0.02",
])
def test_generate_and_chat_break_the_same_way(mock_server: str, faults: str) -> None:
    """The two endpoints share one writer: the same scenario cuts them at the same line."""
    scenario = f"seed=9; tokens=4; {faults}"
    chat = raw_post(mock_server, "/api/chat", scenario)
    generate = raw_post(mock_server, PATH, scenario)
    assert generate.head.split(b"\r\n")[0] == chat.head.split(b"\r\n")[0] == b"HTTP/1.1 200 OK"
    assert generate.terminated == chat.terminated == ("drop_after" not in faults)
    assert generate.body.count(b"\n") == chat.body.count(b"\n")
    assert generate.body.endswith(b"\n") == chat.body.endswith(b"\n")
    assert mock_counts(mock_server)["generations"] == {PATH: 1, "/api/chat": 1}
