"""Capture files: redaction, the writer/reader round trip, malformed files, and replays of
hand-written captures (each outcome written from the bytes, not from a live run)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from unbroken.client import CaptureWriter, read_capture, replay_capture
from unbroken.client.capture import CANCELLED, redact_headers, redact_url
from unbroken.errors import PayloadError
from unbroken.finish import FinishReason, Status


def chat_frame(content: str | None = None, finish: str | None = None) -> bytes:
    delta = {} if content is None else {"content": content}
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"


HELLO = chat_frame("Hé") + chat_frame("llo 👋") + chat_frame(finish="stop") + b"data: [DONE]\n\n"


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def header(dialect: str = "openai-chat") -> dict[str, Any]:
    return {"unbroken_capture": 1, "method": "POST", "url": "http://h/v1", "dialect": dialect,
            "started": 1.0}


def conn(number: int, kind: str = "first", status: int = 200) -> dict[str, Any]:
    return {"connection": number, "kind": kind, "status": status, "headers": {}}


def read(t: float, data: bytes) -> dict[str, Any]:
    return {"t": t, "b": base64.b64encode(data).decode()}


# -- redaction ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("https://g/v1beta/m:streamGenerateContent?alt=sse&key=AIza123",
         "https://g/v1beta/m:streamGenerateContent?alt=sse&key=[redacted]"),
        ("https://h/x?KEY=a&api_key=b&token=c&keep=d",
         "https://h/x?KEY=[redacted]&api_key=[redacted]&token=[redacted]&keep=d"),
        ("https://h/x?monkey=1&key=s#frag", "https://h/x?monkey=1&key=[redacted]#frag"),
        ("https://h/v1/chat/completions", "https://h/v1/chat/completions"),
    ],
)
def test_redact_url(url: str, redacted: str) -> None:
    assert redact_url(url) == redacted


def test_redact_headers_masks_every_credential_and_keeps_the_rest() -> None:
    headers = [
        ("Authorization", "Bearer sk-1"), ("Proxy-Authorization", "Basic x"),
        ("X-API-Key", "sk-2"), ("api-key", "az"), ("x-goog-api-key", "g"), ("Cookie", "c=1"),
        ("Set-Cookie", "s=2"), ("Unbroken-Stream-Token", "t"), ("Content-Type", "text/plain"),
        ("Retry-After", "1"),
    ]
    assert redact_headers(headers) == {
        "authorization": "[redacted]", "proxy-authorization": "[redacted]",
        "x-api-key": "[redacted]", "api-key": "[redacted]", "x-goog-api-key": "[redacted]",
        "cookie": "[redacted]", "set-cookie": "[redacted]",
        "unbroken-stream-token": "[redacted]", "content-type": "text/plain", "retry-after": "1",
    }


# -- writer and reader --------------------------------------------------------------------------


def test_writer_and_reader_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    writer = CaptureWriter(path, method="POST", url="http://h/x?key=sk-9", dialect="openai-chat",
                           started=12.5)
    writer.connection("first", 503, [("Retry-After", "1"), ("Set-Cookie", "sid=sk-9")])
    writer.connection("retry", 200, [("Content-Type", "text/event-stream")])
    writer.read(0.25, HELLO[:7])
    writer.read(0.5, HELLO[7:])
    writer.end()
    writer.close()  # a second close is harmless
    assert "sk-9" not in path.read_text(encoding="utf-8")
    capture = read_capture(path)
    assert (capture.method, capture.url, capture.dialect, capture.started) == (
        "POST", "http://h/x?key=[redacted]", "openai-chat", 12.5)
    assert [(c.number, c.kind, c.status) for c in capture.connections] == [
        (1, "first", 503), (2, "retry", 200)]
    assert capture.connections[0].headers == {"retry-after": "1", "set-cookie": "[redacted]"}
    assert capture.connections[1].reads == [(0.25, HELLO[:7]), (0.5, HELLO[7:])]
    assert capture.body == HELLO
    assert (capture.end, capture.error) == ("eof", None)


def test_writer_records_an_error_end(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    writer = CaptureWriter(path, method="GET", url="u", dialect="auto", started=0.0)
    writer.end("TransportError: cut")
    capture = read_capture(path)
    assert (capture.end, capture.error, capture.connections) == ("error", "TransportError: cut", [])


def test_blank_lines_are_skipped_and_a_missing_end_is_none(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(header()) + "\n\n" + json.dumps(conn(1)) + "\n  \n",
                    encoding="utf-8")
    capture = read_capture(path)
    assert capture.end is None
    assert len(capture.connections) == 1


@pytest.mark.parametrize(
    ("lines", "bad_line", "match"),
    [
        ([], 1, "empty file"),
        (['{"hello": 1}'], 1, "not an unbroken capture"),
        (["not json"], 1, "line 1"),
        ([json.dumps(header()), json.dumps(read(0.0, b"x"))], 2, "before any connection"),
        ([json.dumps(header()), json.dumps(conn(1)), '{"t": 0, "b": "!!!"}'], 3, "line 3"),
        ([json.dumps(header()), json.dumps(conn(1)), '{"t": "x", "b": ""}'], 3, "line 3"),
        ([json.dumps(header()), '{"connection": 1}'], 2, "line 2"),
        ([json.dumps(header()), '{"what": 1}'], 2, "unknown record"),
        ([json.dumps(header()), "[1, 2]"], 2, "line 2"),
    ],
)
def test_a_malformed_capture_names_its_line(
    tmp_path: Path, lines: list[str], bad_line: int, match: str
) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    with pytest.raises(PayloadError, match=match) as caught:
        read_capture(path)
    assert caught.value.line == bad_line


def test_a_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_capture(tmp_path / "nothing.jsonl")


# -- replay -------------------------------------------------------------------------------------

SPLITS: list[list[int] | None] = [None, [1], [2, 5, 3], [10_000]]


@pytest.mark.parametrize("split", SPLITS)
def test_replay_of_a_complete_stream(tmp_path: Path, split: list[int] | None) -> None:
    cut = HELLO.index("👋".encode()) + 2  # the first read ends inside the emoji
    path = write(tmp_path / "c.jsonl", [
        header(), conn(1), read(0.1, HELLO[:cut]), read(0.2, HELLO[cut:]), {"end": "eof"},
    ])
    message = replay_capture(read_capture(path), split=split)
    assert message.status is Status.COMPLETED
    assert message.finish_reason is FinishReason.STOP
    assert message.text == "Héllo 👋"
    assert message.last_seq == 4
    if split in (None, [1]):  # pieces no larger than the reads: each frame keeps its time
        assert [f.t for f in message.trace.frames] == [0.1, 0.2, 0.2, 0.2]


@pytest.mark.parametrize("split", SPLITS)
def test_replay_skips_refused_attempts_and_restarts_on_a_retry(
    tmp_path: Path, split: list[int] | None
) -> None:
    path = write(tmp_path / "c.jsonl", [
        header(),
        conn(1, "first", 429),
        conn(2, "retry"), read(0.1, chat_frame("stale")),  # a fresh attempt replaces it
        conn(3, "retry"), read(0.3, HELLO),
        {"end": "eof"},
    ])
    message = replay_capture(read_capture(path), split=split)
    assert message.status is Status.COMPLETED
    assert message.text == "Héllo 👋"


@pytest.mark.parametrize("split", SPLITS)
def test_replay_continues_the_same_message_on_a_resume(
    tmp_path: Path, split: list[int] | None
) -> None:
    frames = [chat_frame("a"), chat_frame("b"), chat_frame("c"), chat_frame(finish="stop")]
    numbered = [b"id: %d\n" % n + frame for n, frame in enumerate(frames, 1)]
    path = write(tmp_path / "c.jsonl", [
        header(),
        conn(1), read(0.1, b"".join(numbered[:2]) + numbered[2][:9]),
        # The server repeats frame 2: it is counted, never appended.
        conn(2, "resume"), read(0.5, b"".join(numbered[1:])),
        {"end": "eof"},
    ])
    message = replay_capture(read_capture(path), split=split)
    assert message.status is Status.COMPLETED
    assert message.text == "abc"
    assert message.duplicates == 1
    assert message.last_seq == 4
    assert "resumed" in [w.code for w in message.warnings]


@pytest.mark.parametrize("split", SPLITS)
def test_replay_of_a_stream_that_failed_on_invalid_utf8(
    tmp_path: Path, split: list[int] | None
) -> None:
    bad = chat_frame("ok") + b'data: {"choices": [{"index": 0, "delta": {"content": "\xff"}}]}\n\n'
    path = write(tmp_path / "c.jsonl", [
        header(), conn(1), read(0.1, bad + chat_frame("never")),
        {"end": "error", "error": "invalid UTF-8"},
    ])
    message = replay_capture(read_capture(path), split=split)
    assert message.status is Status.FAILED
    assert message.text == "ok"


@pytest.mark.parametrize("split", SPLITS)
def test_replay_of_a_cut_stream_is_interrupted(tmp_path: Path, split: list[int] | None) -> None:
    path = write(tmp_path / "c.jsonl", [
        header(), conn(1), read(0.1, HELLO[: HELLO.index(b"\n\n") + 2 + 20]),
        {"end": "error", "error": "TransportError: peer closed"},
    ])
    message = replay_capture(read_capture(path), split=split)
    assert message.status is Status.INTERRUPTED
    assert message.text == "Hé"
    assert message.error is not None and str(message.error) == "TransportError: peer closed"
    assert "unterminated_tail" in [w.code for w in message.warnings]


@pytest.mark.parametrize("split", SPLITS)
def test_replay_of_a_cancelled_stream_is_cancelled(tmp_path: Path, split: list[int] | None) -> None:
    path = write(tmp_path / "c.jsonl", [
        header(), conn(1), read(0.1, HELLO[: HELLO.index(b"\n\n") + 2]),
        {"end": "error", "error": CANCELLED},
    ])
    message = replay_capture(read_capture(path), split=split)
    assert message.status is Status.CANCELLED
    assert message.text == "Hé"


def test_replay_with_another_dialect(tmp_path: Path) -> None:
    path = write(tmp_path / "c.jsonl", [header("auto"), conn(1), read(0.0, HELLO), {"end": "eof"}])
    assert replay_capture(read_capture(path)).text == "Héllo 👋"
    assert replay_capture(read_capture(path), dialect="openai-chat").text == "Héllo 👋"


def test_replay_of_a_capture_without_an_answer(tmp_path: Path) -> None:
    path = write(tmp_path / "c.jsonl", [
        header(), conn(1, status=503), {"end": "error", "error": "upstream answered HTTP 503"},
    ])
    message = replay_capture(read_capture(path))
    assert message.status is Status.INTERRUPTED
    assert message.text == ""
