"""Evidence for a stream the proxy served: ``GET /v1/streams/{id}/capture`` (a real proxy on a
real SQLite file, or a real Redis, in front of the mock), fed to ``unbroken inspect`` and
``unbroken replay`` by URL, as an operator runs them."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from tests.integration.test_proxy_support import (
    CALLS,
    DIALECTS,
    KEY,
    OTHER_KEY,
    FrameReader,
    free_port,
    running_proxy,
    stream_status,
)

from unbroken.cli.main import main
from unbroken.cli.replay import SPLITS
from unbroken.mock import reply_text

pytestmark = pytest.mark.integration

TOKENS = 6
STALL_S = 1.2  # the mock's pause; inspect is run with --stall 1
SEED = 31


@pytest.fixture(scope="module")
def proxy(mock_server_session: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    store = tmp_path_factory.mktemp("evidence") / "journal.db"
    with running_proxy(mock_server_session, store=f"sqlite:///{store}") as (base_url, _app):
        yield base_url


def start(proxy: str, dialect: str, scenario: str) -> tuple[str, str, bytes]:
    """Stream one request through the proxy to its end: stream id, stream token, body."""
    call = CALLS[dialect]
    response = httpx2.post(proxy + call.path, json=call.body, headers=call.headers(scenario),
                           timeout=30)
    assert response.status_code == 200, response.text
    return (response.headers["unbroken-stream-id"], response.headers["unbroken-stream-token"],
            response.content)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``unbroken <args>`` in this process: exit code, stdout, stderr."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def inspect_json(capsys: pytest.CaptureFixture[str], url: str, *auth: str) -> dict[str, Any]:
    code, out, err = cli(capsys, "inspect", url, *auth, "--json", "--stall", "1")
    assert (code, err) == (0, "")
    report: dict[str, Any] = json.loads(out)
    return report


def capture_url(proxy: str, stream_id: str) -> str:
    return f"{proxy}/v1/streams/{stream_id}/capture"


@pytest.mark.parametrize("dialect", DIALECTS)
def test_inspect_tells_a_served_streams_story_with_its_stall(
    proxy: str, mock_server: str, capsys: pytest.CaptureFixture[str], dialect: str
) -> None:
    call = CALLS[dialect]
    stalled_after = call.first_text + 1  # the second text frame, then a pause
    stream_id, token, _body = start(
        proxy, dialect, f"seed={SEED}; tokens={TOKENS}; stall_after={stalled_after}; "
                        f"stall_s={STALL_S}")
    total = call.total(TOKENS)
    url = capture_url(proxy, stream_id)

    report = inspect_json(capsys, url, "--token", token)
    verdict = report["verdict"]
    # Responses frames are numbered by their sequence_number (from 0), the others by position.
    first = 0 if dialect == "openai-responses" else 1
    assert (verdict["status"], verdict["finish_reason"], verdict["text"], verdict["last_seq"]) \
        == ("completed", "stop", reply_text(SEED, TOKENS), first + total - 1)
    assert verdict["error"] is None
    frames = report["frames"]
    assert [frame["seq"] for frame in frames] == list(range(first, first + total))
    assert [frame["outcome"] for frame in frames] == ["committed"] * total
    # One stall, right where the mock paused: after the frame it stalled after.
    (stall,) = [w for w in verdict["warnings"] if w["code"] == "stall"]
    assert stall["detail"].endswith(f"(from t={frames[stalled_after - 1]['t']:.3f})")
    assert [w["code"] for w in verdict["warnings"]] == ["stall"]
    assert report["capture"] == {"method": "POST", "url": call.path.partition("?")[0],
                                 "dialect": dialect, "connections": 1, "end": "eof",
                                 "error": None, "source": "unbroken-proxy-journal"}
    # The journal and the capture agree.
    status = stream_status(proxy, stream_id)
    assert (status["status"], status["text"], status["last_seq"]) == (
        "completed", reply_text(SEED, TOKENS), total)

    # The same Message under every other cut of the bytes.
    for split in SPLITS:
        code, out, err = cli(capsys, "replay", url, "--token", token, "--split", split, "--json")
        assert (code, err) == (0, ""), out
        replayed = json.loads(out)
        assert replayed["identical"] is True
        assert replayed["replayed"]["text"] == reply_text(SEED, TOKENS)
        assert replayed["replayed"]["status"] == "completed"


def test_the_export_is_the_journaled_frames_with_their_times(
    proxy: str, mock_server: str
) -> None:
    stream_id, token, body = start(proxy, "anthropic", f"seed={SEED}; tokens=3")
    response = httpx2.get(capture_url(proxy, stream_id), params={"token": token}, timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-ndjson"
    assert response.headers["content-disposition"] == f'attachment; filename="{stream_id}.jsonl"'
    assert token not in response.text and KEY not in response.text
    records = [json.loads(line) for line in response.text.splitlines()]
    header, connection, *reads, end = records
    status = stream_status(proxy, stream_id)
    assert header == {"unbroken_capture": 1, "method": "POST", "url": "/v1/messages",
                      "dialect": "anthropic", "started": status["created"],
                      "source": "unbroken-proxy-journal", "stream_id": stream_id}
    assert connection["status"] == 200
    assert connection["headers"]["unbroken-stream-id"] == stream_id
    assert "unbroken-stream-token" not in connection["headers"]
    total = CALLS["anthropic"].total(3)
    assert [read["seq"] for read in reads] == list(range(1, total + 1))
    times = [read["t"] for read in reads]
    assert times == sorted(times) and times[0] >= 0.0
    # The bytes are what the client got, less the proxy's id: and retry: lines.
    served = b"".join(line + b"\n" for line in body.split(b"\n")[:-1]
                      if not line.startswith((b"id: ", b"retry: ")))
    assert b"".join(base64.b64decode(read["b"]) for read in reads) == served
    assert end == {"end": "eof", "status": "completed", "finish_reason": "stop",
                   "last_seq": total,
                   "usage": {"input_tokens": 12, "output_tokens": 3, "cached_tokens": 0}}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_an_upstream_cut_shows_interrupted_with_the_exact_prefix(
    proxy: str, mock_server: str, capsys: pytest.CaptureFixture[str], dialect: str
) -> None:
    call = CALLS[dialect]
    cut_after = call.first_text + 2  # three text frames got through
    stream_id, _token, _body = start(proxy, dialect,
                                     f"seed={SEED}; tokens={TOKENS}; drop_after={cut_after}")
    prefix = call.text_after(SEED, TOKENS, cut_after)
    auth = CALLS[dialect].auth_header
    credential = f"Bearer {KEY}" if auth == "authorization" else KEY
    report = inspect_json(capsys, capture_url(proxy, stream_id), "-H", f"{auth}: {credential}")
    verdict = report["verdict"]
    first = 0 if dialect == "openai-responses" else 1
    assert (verdict["status"], verdict["finish_reason"], verdict["text"], verdict["last_seq"]) \
        == ("interrupted", None, prefix, first + cut_after - 1)
    assert verdict["error"].startswith(
        "StreamError: unbroken proxy: the upstream stream broke before it finished (")
    assert [frame["seq"] for frame in report["frames"]] == list(range(first, first + cut_after))
    assert report["capture"]["end"] == "error"
    assert [w["code"] for w in verdict["warnings"]] == ["no_finish_reason", "error"]
    # The journal says the same; its last frame, the proxy's own, is in the end record.
    status = stream_status(proxy, stream_id)
    assert (status["status"], status["text"], status["last_seq"]) == (
        "interrupted", prefix, cut_after + 1)
    lines = httpx2.get(capture_url(proxy, stream_id), headers={auth: credential},
                       timeout=10).text.splitlines()
    end = json.loads(lines[-1])
    assert (end["proxy_frame"]["seq"], end["status"], end["last_seq"]) == (
        cut_after + 1, "interrupted", cut_after + 1)
    assert b"unbroken proxy: " in base64.b64decode(end["proxy_frame"]["b"])


def test_only_the_creator_or_the_token_holder_gets_the_capture(
    proxy: str, mock_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    stream_id, token, _body = start(proxy, "openai-chat", f"seed={SEED}; tokens=2")
    url = capture_url(proxy, stream_id)
    mine = {"authorization": f"Bearer {KEY}"}
    assert httpx2.get(url, headers=mine, timeout=10).status_code == 200
    assert httpx2.get(url, headers={"unbroken-stream-token": token}, timeout=10).status_code \
        == 200
    assert httpx2.get(url + f"?token={token}", timeout=10).status_code == 200
    for refused in ({"authorization": f"Bearer {OTHER_KEY}"}, {},
                    {"unbroken-stream-token": token[:-2] + "xx"}):
        response = httpx2.get(url, headers=refused, timeout=10)
        assert (response.status_code, response.json()["error"]["type"]) == (404, "not_found")
    assert httpx2.get(capture_url(proxy, "ub_000000000000000000000000"), headers=mine,
                      timeout=10).status_code == 404

    code, out, err = cli(capsys, "inspect", url, "-H", f"Authorization: Bearer {OTHER_KEY}")
    assert (code, out) == (3, "")
    assert err == (f"unbroken: cannot fetch capture {url}: HTTP 404 no such stream (unknown, "
                   "expired, or not yours)\n")
    # A token in the URL never reaches the terminal.
    code, _out, err = cli(capsys, "replay", url + "?token=not-the-token")
    assert code == 3
    assert err == (f"unbroken: cannot fetch capture {url}?token=[redacted]: HTTP 404 no such "
                   "stream (unknown, expired, or not yours)\n")


def test_a_live_stream_exports_what_is_journaled_then_its_cancelled_end(
    proxy: str, mock_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    call = CALLS["openai-chat"]
    headers = call.headers(f"seed={SEED}; tokens={TOKENS}; stall_after=3; stall_s=30")
    with httpx2.stream("POST", proxy + call.path, json=call.body, headers=headers,
                       timeout=30) as response:
        stream_id = response.headers["unbroken-stream-id"]
        token = response.headers["unbroken-stream-token"]
        FrameReader(response, "openai-chat").take(3)  # journaled before they were sent
        url = capture_url(proxy, stream_id)
        report = inspect_json(capsys, url, "--token", token)
        assert report["capture"]["end"] == "live"
        verdict = report["verdict"]
        assert (verdict["status"], verdict["text"], verdict["last_seq"]) == (
            "streaming", call.text_after(SEED, TOKENS, 3), 3)
        code, out, _err = cli(capsys, "inspect", url, "--token", token)
        assert code == 0
        assert "the stream was still going when this capture was taken" in out
        cancelled = httpx2.post(f"{proxy}/v1/streams/{stream_id}/cancel",
                                headers={"unbroken-stream-token": token}, timeout=30)
        assert cancelled.json()["status"] == "cancelled"
    report = inspect_json(capsys, url, "--token", token)
    verdict = report["verdict"]
    assert (verdict["status"], verdict["text"], verdict["last_seq"]) == (
        "cancelled", call.text_after(SEED, TOKENS, 3), 3)
    assert report["capture"]["error"] == "cancelled by the caller"


def test_the_human_view_says_where_the_capture_came_from(
    proxy: str, mock_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    stream_id, token, _body = start(proxy, "ollama", f"seed={SEED}; tokens=2")
    code, out, err = cli(capsys, "inspect", capture_url(proxy, stream_id), "--token", token)
    assert (code, err) == (0, "")
    text = " ".join(out.split())
    assert "rebuilt from unbroken-proxy-journal: one read per journaled frame at its receive " \
           "time; upstream id:/retry: lines and comments are not kept" in text
    assert f"verdict: completed, finish reason stop (raw 'stop'), last seq 3, " \
           f"{len(reply_text(SEED, 2))} characters of text" in text


def test_fetch_failures_are_one_line_with_their_exit_codes(
    proxy: str, mock_server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    port = free_port()
    refused = f"http://127.0.0.1:{port}/v1/streams/ub_000000000000000000000000/capture"
    code, out, err = cli(capsys, "inspect", refused, "--token", "t")
    assert (code, out) == (4, "")
    assert err.startswith(f"unbroken: cannot fetch capture {refused}: ConnectError: ")
    assert err.count("\n") == 1
    # A body that is not a capture: the stream's status, not its capture.
    stream_id, token, _body = start(proxy, "openai-chat", f"seed={SEED}; tokens=2")
    status_url = f"{proxy}/v1/streams/{stream_id}"
    code, out, err = cli(capsys, "replay", status_url, "--token", token)
    assert (code, out) == (3, "")
    assert err == (f"unbroken: unreadable capture: {status_url}: line 1: not an unbroken "
                   "capture (no unbroken_capture: 1 header)\n")


@pytest.mark.parametrize("dialect", ["openai-responses", "gemini"])
def test_a_proxy_on_redis_exports_the_same_capture(
    mock_server: str, redis_url: str, capsys: pytest.CaptureFixture[str], dialect: str
) -> None:
    call = CALLS[dialect]
    with running_proxy(mock_server, store=redis_url) as (base_url, _app):
        stream_id, token, _body = start(base_url, dialect, f"seed={SEED}; tokens={TOKENS}")
        report = inspect_json(capsys, capture_url(base_url, stream_id), "--token", token)
        raw = httpx2.get(capture_url(base_url, stream_id), params={"token": token},
                         timeout=10).text
    verdict = report["verdict"]
    first = 0 if dialect == "openai-responses" else 1
    total = call.total(TOKENS)
    assert (verdict["status"], verdict["text"], verdict["last_seq"]) == (
        "completed", reply_text(SEED, TOKENS), first + total - 1)
    assert [frame["seq"] for frame in report["frames"]] == list(range(first, first + total))
    # Every receive time came back from Redis (none untimed), in order.
    reads = [json.loads(line) for line in raw.splitlines() if '"t":' in line]
    assert [read["seq"] for read in reads] == list(range(1, total + 1))
    assert [read.get("untimed") for read in reads] == [None] * total
    times = [read["t"] for read in reads]
    assert times == sorted(times) and times[0] >= 0.0
