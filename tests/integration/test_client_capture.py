"""``capture=path`` writes every read of every attempt; replaying the file gives the same message
under the original reads, one byte at a time, and random re-cuts; no credential reaches it."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from typing import Any

import pytest
from tests.integration.test_client_support import (
    DRIVERS,
    LAYOUTS,
    raw_body,
    reset_mock,
    run_stream,
)

from unbroken.client import read_capture, replay_capture
from unbroken.finish import Status
from unbroken.message import Message
from unbroken.mock import reply_text

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SECRET = "sk-test-SECRET"
CREDENTIALS = {"Authorization": f"Bearer {SECRET}", "x-api-key": SECRET, "x-goog-api-key": SECRET}
BACKGROUND = {"model": "m", "stream": True, "background": True, "input": "hi"}


@pytest.fixture
def mock(mock_server_session: str) -> str:
    return reset_mock(mock_server_session)


def outcome(message: Message) -> tuple[Any, ...]:
    return (
        message.status,
        message.text,
        message.finish_reason,
        message.raw_finish_reason,
        message.last_seq,
        message.tool_calls,
        message.reasoning,
        message.duplicates,
        message.usage,
    )


def random_sizes(seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(1, 97) for _ in range(41)]


# (dialect, scenarios per attempt, body, extra options, expected status, connection kinds)
Case = tuple[str, list[str], dict[str, Any] | None, dict[str, Any], Status, list[str]]
CASES: dict[str, Case] = {
    "tool-call": ("openai-chat", ["tokens=5; finish=tool_calls"], None, {},
                  Status.COMPLETED, ["first"]),
    "background-resume": ("openai-responses", ["tokens=5; drop_after=7; drop_mid=1"], BACKGROUND,
                          {}, Status.COMPLETED, ["first", "resume"]),
    "sse-resume": ("anthropic", ["tokens=5; sse_ids=1; drop_after=6", "tokens=5; sse_ids=1"],
                   None, {"resume": "sse"}, Status.COMPLETED, ["first", "resume"]),
    "idle-resume": ("openai-chat", ["tokens=6; sse_ids=1; pings=1; stall_after=4; stall_s=30"],
                    None, {"resume": "sse", "idle_timeout": 0.5}, Status.COMPLETED,
                    ["first", "resume"]),
    "retry": ("gemini", ["tokens=5; drop_after=0", "tokens=5; split_utf8=1"], None, {},
              Status.COMPLETED, ["first", "retry"]),
    "status-retry": ("ollama", ["tokens=5; status=503; status_times=1"], None, {},
                     Status.COMPLETED, ["first", "retry"]),
    "interrupted": ("ollama", ["tokens=5; drop_after=3; drop_mid=1"], None, {},
                    Status.INTERRUPTED, ["first"]),
    "failed": ("openai-responses", ["tokens=5; invalid_utf8_at=6"], None, {},
               Status.FAILED, ["first"]),
    "truncated": ("anthropic", ["tokens=5; finish=length"], None, {},
                  Status.TRUNCATED, ["first"]),
}


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("case", list(CASES))
async def test_replaying_a_capture_gives_the_same_message(
    mock: str, tmp_path: Path, driver: str, case: str
) -> None:
    dialect, scenarios, body, options, status, kinds = CASES[case]
    path = tmp_path / "stream.jsonl"
    run = await run_stream(
        driver, LAYOUTS[dialect].url(mock), dialect=dialect, scenario=scenarios, body=body,
        capture=path, raise_on_error=False, **options,
    )
    assert run.message.status is status
    capture = read_capture(path)
    assert capture.method == "POST"
    assert capture.dialect == dialect
    assert [c.kind for c in capture.connections] == kinds
    assert [c.number for c in capture.connections] == list(range(1, len(kinds) + 1))
    expected_end = "eof" if status in (Status.COMPLETED, Status.TRUNCATED) else "error"
    assert capture.end == expected_end
    live = outcome(run.message)
    assert outcome(replay_capture(capture)) == live
    assert outcome(replay_capture(capture, split=[1])) == live
    for seed in range(3):
        assert outcome(replay_capture(capture, split=random_sizes(seed))) == live


@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_capture_holds_the_exact_bytes_and_records(
    mock: str, tmp_path: Path, driver: str
) -> None:
    path = tmp_path / "stream.jsonl"
    scenario = "tokens=6; status=429; status_times=1; retry_after=0.01"
    run = await run_stream(
        driver, LAYOUTS["openai-chat"].url(mock), dialect="openai-chat", scenario=scenario,
        capture=path,
    )
    assert run.message.text == reply_text(0, 6)
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    header, refused, answered, *reads, end = records
    assert set(header) == {"unbroken_capture", "method", "url", "dialect", "started"}
    assert header["unbroken_capture"] == 1
    assert header["url"] == mock + "/v1/chat/completions"
    assert (refused["connection"], refused["kind"], refused["status"]) == (1, "first", 429)
    assert refused["headers"]["retry-after-ms"] == "10"
    assert (answered["connection"], answered["kind"], answered["status"]) == (2, "retry", 200)
    assert answered["headers"]["content-type"] == "text/event-stream; charset=utf-8"
    assert end == {"end": "eof"}
    assert all(set(r) == {"t", "b"} for r in reads)
    times = [r["t"] for r in reads]
    assert times == sorted(times)
    body = b"".join(base64.b64decode(r["b"]) for r in reads)
    # The 429's body was read for the error's excerpt, not recorded as a read of the stream.
    assert body == raw_body(mock, "openai-chat", "tokens=6")
    assert read_capture(path).body == body


@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_cancelled_stream_replays_cancelled(
    mock: str, tmp_path: Path, driver: str
) -> None:
    path = tmp_path / "stream.jsonl"
    run = await run_stream(
        driver, LAYOUTS["anthropic"].url(mock), dialect="anthropic",
        scenario="tokens=20; delay_ms=2", capture=path, stop_after=3,
    )
    assert run.message.status is Status.CANCELLED
    capture = read_capture(path)
    assert (capture.end, capture.error) == ("error", "cancelled by the caller")
    assert outcome(replay_capture(capture)) == outcome(run.message)
    assert outcome(replay_capture(capture, split=[1])) == outcome(run.message)


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("dialect", ["openai-chat", "anthropic", "gemini"])
async def test_no_credential_reaches_the_capture_file(
    mock: str, tmp_path: Path, driver: str, dialect: str
) -> None:
    path = tmp_path / "stream.jsonl"
    layout = LAYOUTS[dialect]
    url = layout.url(mock) + ("&" if "?" in layout.path else "?") + f"key={SECRET}"
    run = await run_stream(
        driver, url, dialect=dialect, headers=CREDENTIALS, capture=path,
        scenario=["tokens=3; drop_after=0", "tokens=3"],
    )
    assert run.message.text == reply_text(0, 3)
    # The credentials did reach the server: the mock saw them on both attempts.
    assert len(run.requests) == 2
    text = path.read_text(encoding="utf-8")
    assert SECRET not in text
    assert "SECRET" not in base64.b64decode("".join(
        json.loads(line).get("b", "") for line in text.splitlines()
    )).decode("utf-8")
    header = json.loads(text.splitlines()[0])
    assert header["url"].endswith("key=[redacted]")
