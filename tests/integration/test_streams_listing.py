"""Finding streams: ``unbroken streams`` on the SQLite file a real proxy wrote (in front of the
mock, with a dropped and a failed stream), its capture export read by ``unbroken inspect``
offline; and ``GET /v1/streams`` on a real proxy, each credential seeing only its own."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx2
import pytest
from tests.integration.test_proxy_support import (
    CALLS,
    KEY,
    OTHER_KEY,
    running_proxy,
    stream_status,
)

from unbroken.cli.main import main
from unbroken.mock import reply_deltas, reply_text

pytestmark = pytest.mark.integration


@dataclass(frozen=True, slots=True)
class Served:
    """A stream the proxy served: its id, its status as ``GET /v1/streams/{id}`` tells it,
    and the capture the proxy exported for it."""

    stream_id: str
    status: dict[str, Any]
    capture: bytes


@dataclass(frozen=True, slots=True)
class Journaled:
    store: str
    completed: Served
    interrupted: Served
    failed: Served


def serve(proxy: str, dialect: str, scenario: str) -> str:
    call = CALLS[dialect]
    response = httpx2.post(proxy + call.path, json=call.body, headers=call.headers(scenario),
                           timeout=30)
    assert response.status_code == 200, response.text
    return response.headers["unbroken-stream-id"]


def served(proxy: str, stream_id: str) -> Served:
    capture = httpx2.get(f"{proxy}/v1/streams/{stream_id}/capture",
                         headers={"authorization": f"Bearer {KEY}"}, timeout=10)
    assert capture.status_code == 200
    return Served(stream_id, stream_status(proxy, stream_id), capture.content)


@pytest.fixture(scope="module")
def journaled(mock_server_session: str,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Journaled]:
    """Three streams in a SQLite file, oldest first: completed, interrupted, failed; then the
    proxy is stopped (the file stays as it left it)."""
    path = tmp_path_factory.mktemp("streams") / "journal.db"
    store = f"sqlite:///{path}"
    with running_proxy(mock_server_session, store=store) as (proxy, _app):
        ids = [serve(proxy, "openai-chat", "seed=5; tokens=3"),
               serve(proxy, "openai-chat", "seed=6; tokens=4; drop_after=3"),
               serve(proxy, "anthropic", "seed=7; tokens=2; finish=error")]
        streams = [served(proxy, stream_id) for stream_id in ids]
    yield Journaled(store, *streams)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def json_row(stream: Served, dialect: str, path: str) -> dict[str, Any]:
    status = stream.status
    return {"id": stream.stream_id, "created": status["created"], "updated": status["updated"],
            "dialect": dialect, "request_path": path, "status": status["status"],
            "finish_reason": status["finish_reason"],
            "raw_finish_reason": status["raw_finish_reason"], "last_seq": status["last_seq"],
            "upstream_requests": 1, "error": status["error"], "usage": status["usage"],
            "usage_missing": status["usage_missing"], "provider_id": status["provider_id"],
            "background": False}


# -- what the proxy journaled (the facts the CLI is checked against) ---------------------------

def test_the_three_streams_ended_as_their_faults_say(journaled: Journaled) -> None:
    completed, interrupted, failed = (journaled.completed.status,
                                      journaled.interrupted.status, journaled.failed.status)
    assert (completed["status"], completed["finish_reason"], completed["text"],
            completed["last_seq"]) == ("completed", "stop", reply_text(5, 3), 6)
    assert (interrupted["status"], interrupted["finish_reason"], interrupted["text"]) == (
        "interrupted", None, "".join(reply_deltas(6, 4)[:2]))
    assert interrupted["last_seq"] == 4  # 3 upstream frames, then the proxy's error frame
    # An error event in the stream: finish reason error, the provider's error type as raw.
    assert (failed["status"], failed["finish_reason"], failed["raw_finish_reason"],
            failed["last_seq"]) == ("failed", "error", "overloaded_error", 7)
    assert failed["error"] == {"type": "overloaded_error", "message": "Overloaded",
                               "retryable": True}
    # Usage: what the upstream last reported, whatever the end; none says why, never 0.
    assert (completed["usage"], completed["usage_missing"]) == (
        {"input_tokens": 12, "output_tokens": 3, "total_tokens": 15, "reasoning_tokens": 0,
         "cached_tokens": 0}, None)
    assert (interrupted["usage"], interrupted["usage_missing"]) == (
        None, "the stream ended interrupted before the upstream reported usage")
    assert (failed["usage"], failed["usage_missing"]) == (
        {"input_tokens": 12, "output_tokens": 1, "cached_tokens": 0}, None)


# -- unbroken streams --------------------------------------------------------------------------

def test_json_lines_newest_first(journaled: Journaled,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "streams", "--store", journaled.store, "--json")
    assert (code, err) == (0, "")
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows == [
        json_row(journaled.failed, "anthropic", "/v1/messages"),
        json_row(journaled.interrupted, "openai-chat", "/v1/chat/completions"),
        json_row(journaled.completed, "openai-chat", "/v1/chat/completions"),
    ]
    # Nothing secret: no hash of a credential or token, not the key itself.
    assert re.search("[0-9a-f]{64}", out) is None and KEY not in out


def test_status_and_time_filters(journaled: Journaled,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    def listed(*args: str) -> list[str]:
        code, out, err = cli(capsys, "streams", "--store", journaled.store, "--json", *args)
        assert (code, err) == (0, "")
        return [json.loads(line)["id"] for line in out.splitlines()]

    failed, interrupted, completed = (journaled.failed.stream_id,
                                      journaled.interrupted.stream_id,
                                      journaled.completed.stream_id)
    assert listed("--status", "interrupted,failed") == [failed, interrupted]
    assert listed("--status", "completed") == [completed]
    assert listed("--status", "cancelled") == []
    assert listed("--since", "1h") == [failed, interrupted, completed]
    assert listed("--since", "2999-01-01T00:00") == []
    assert listed("--until", "2000-01-01T00:00+00:00") == []
    between = (journaled.interrupted.status["created"] + journaled.failed.status["created"]) / 2
    assert listed("--since", datetime.fromtimestamp(between).isoformat(),
                  "--status", "failed,completed") == [failed]
    assert listed("--until", datetime.fromtimestamp(between).isoformat(),
                  "--status", "failed,completed") == [completed]
    assert listed("--limit", "2") == [failed, interrupted]


def test_the_table(journaled: Journaled, capsys: pytest.CaptureFixture[str],
                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setenv("COLUMNS", "220")
    try:
        code, out, err = cli(capsys, "streams", "--store", journaled.store)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert (code, err) == (0, "")
    lines = [line for line in out.splitlines() if line.strip()]
    # Cells cut at the headings' columns (a cell may be empty).
    starts = [match.start() for match in re.finditer(r"\S+", lines[0])]
    cells = [[line[start:end].strip() for start, end in zip(starts, [*starts[1:], None],
                                                            strict=True)]
             for line in lines[2:-1]]
    assert lines[0].split() == ["id", "created", "dialect", "status", "finish", "seq",
                                "requests", "tokens", "error"]
    assert set(lines[1].strip()) == {"─"}
    assert lines[-1] == "3 stream(s), newest first"

    def utc(stream: Served) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(stream.status["created"]))

    failed, interrupted, completed = journaled.failed, journaled.interrupted, journaled.completed
    error = interrupted.status["error"]
    shown = f"{error['type']}: {error['message']}"
    shown = shown if len(shown) <= 60 else shown[:59] + "…"
    assert cells == [
        # Anthropic's message_start said 12 in, 1 out; the chat stream cut before its usage
        # chunk has none (never 0); the completed one has the usage the proxy asked for.
        [failed.stream_id, utc(failed), "anthropic", "failed", "error", "7", "1", "12/1",
         "overloaded_error: Overloaded"],
        [interrupted.stream_id, utc(interrupted), "openai-chat", "interrupted", "", "4", "1",
         "none", shown],
        [completed.stream_id, utc(completed), "openai-chat", "completed", "stop", "6", "1",
         "12/3", ""],
    ]


def test_the_table_says_when_more_are_stored(journaled: Journaled,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = cli(capsys, "streams", "--store", journaled.store, "--limit", "1")
    assert code == 0
    assert out.splitlines()[-1] == "1 stream(s), newest first, more stored (--limit)"
    code, out, _err = cli(capsys, "streams", "--store", journaled.store, "--since", "2999-01-01")
    assert (code, out) == (0, "no streams\n")


def test_the_capture_export_is_the_proxys_and_inspect_reads_it_offline(
    journaled: Journaled, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    interrupted = journaled.interrupted
    path = tmp_path / "cap.jsonl"
    code, out, err = cli(capsys, "streams", "--store", journaled.store,
                         "--capture", interrupted.stream_id, "-o", str(path))
    assert (code, out, err) == (0, "", "")
    assert path.read_bytes() == interrupted.capture  # the same exporter as the proxy's
    code, out, err = cli(capsys, "inspect", str(path), "--json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert report["capture"]["source"] == "unbroken-proxy-journal"
    verdict = report["verdict"]
    assert (verdict["status"], verdict["finish_reason"], verdict["text"]) == (
        "interrupted", None, "".join(reply_deltas(6, 4)[:2]))
    # To stdout without -o.
    code, out, err = cli(capsys, "streams", "--store", journaled.store,
                         "--capture", journaled.completed.stream_id)
    assert (code, err) == (0, "")
    assert out.encode() == journaled.completed.capture


def test_the_file_is_read_only_to_the_command(journaled: Journaled,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(journaled.store.removeprefix("sqlite:///"))
    before = path.read_bytes()
    assert cli(capsys, "streams", "--store", journaled.store)[0] == 0
    assert path.read_bytes() == before


@pytest.mark.parametrize(("args", "code", "message"), [
    (("--status", "done"), 2, "unbroken: --status: unknown status done; expected some of "
     "pending, streaming, completed, truncated, filtered, interrupted, failed, cancelled"),
    (("--since", "yesterday"), 2, "unbroken: --since: expected a duration (90s, 30m, 2h, 1d) "
     "or a time (2026-12-03T08:00), got 'yesterday'"),
    (("--limit", "0"), 2, "unbroken: --limit must be at least 1, not 0"),
    (("-o", "x.jsonl"), 2, "unbroken: -o/--output goes with --capture ID"),
    (("--capture", "ub_000000000000000000000000"), 3,
     "unbroken: no stream ub_000000000000000000000000 in {store} (unknown or purged)"),
])
def test_errors_are_one_line_with_their_exit_code(
    journaled: Journaled, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], code: int,
    message: str,
) -> None:
    assert cli(capsys, "streams", "--store", journaled.store, *args) == (
        code, "", message.format(store=journaled.store) + "\n")


def test_stores_it_cannot_read(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = f"sqlite:///{tmp_path}/none.db"
    assert cli(capsys, "streams", "--store", missing) == (
        4, "", f"unbroken: cannot read store {missing}: FileNotFoundError: {tmp_path}/none.db: "
               "no such journal file\n")
    assert not (tmp_path / "none.db").exists()
    assert cli(capsys, "streams", "--store", "memory://") == (
        2, "", "unbroken: memory:// lives inside a proxy process: give its sqlite:///path.db "
               "or redis:// store\n")
    code, out, err = cli(capsys, "streams", "--store", "ftp://x")
    assert (code, out) == (2, "") and err.startswith("unbroken: unknown store 'ftp://x'")
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 100)
    code, out, err = cli(capsys, "streams", "--store", f"sqlite:///{tmp_path}/junk.db")
    assert (code, out, err) == (4, "", f"unbroken: cannot read store sqlite:///{tmp_path}/"
                                       "junk.db: DatabaseError: file is not a database\n")


# -- GET /v1/streams ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def proxy(mock_server_session: str) -> Iterator[str]:
    with running_proxy(mock_server_session) as (base_url, _app):
        yield base_url


def own(proxy: str, key: str | None = KEY, header: str = "authorization",
        **params: str) -> httpx2.Response:
    headers = {} if key is None else {
        header: f"Bearer {key}" if header == "authorization" else key}
    return httpx2.get(proxy + "/v1/streams", headers=headers, params=params, timeout=10)


def test_each_credential_lists_only_its_own_streams(proxy: str) -> None:
    chat = CALLS["openai-chat"]
    mine = [serve(proxy, "openai-chat", "seed=1; tokens=2"),
            serve(proxy, "openai-chat", "seed=2; tokens=3; drop_after=2")]
    theirs = httpx2.post(proxy + chat.path, json=chat.body,
                         headers=chat.headers("seed=3; tokens=2", key=OTHER_KEY), timeout=30)
    assert theirs.status_code == 200
    their_id = theirs.headers["unbroken-stream-id"]

    answer = own(proxy)
    assert answer.status_code == 200
    assert answer.headers["cache-control"] == "no-store"
    body = answer.json()
    statuses = {stream_id: stream_status(proxy, stream_id) for stream_id in mine}
    assert body == {"next_cursor": None, "streams": [
        {"id": stream_id, "status": statuses[stream_id]["status"],
         "finish_reason": statuses[stream_id]["finish_reason"],
         "created": statuses[stream_id]["created"], "updated": statuses[stream_id]["updated"],
         "last_seq": statuses[stream_id]["last_seq"], "dialect": "openai-chat",
         "request_path": "/v1/chat/completions"}
        for stream_id in reversed(mine)]}
    assert [stream["status"] for stream in body["streams"]] == ["interrupted", "completed"]
    # The same secret in another credential header is the same credential.
    assert own(proxy, KEY, "x-api-key").json() == body
    assert own(proxy, OTHER_KEY).json()["streams"][0]["id"] == their_id
    assert [s["id"] for s in own(proxy, OTHER_KEY).json()["streams"]] == [their_id]
    assert own(proxy, "sk-nobody").json() == {"streams": [], "next_cursor": None}
    token = theirs.headers["unbroken-stream-token"]
    assert token not in answer.text and their_id not in answer.text


def test_no_credential_is_401(proxy: str) -> None:
    message = ("unbroken proxy: listing streams needs the credential that created them "
               "(Authorization, x-api-key, x-goog-api-key or ?key=)")
    expected = {"error": {"message": message, "type": "invalid_request_error", "param": None,
                          "code": None}}
    answer = own(proxy, None)
    assert (answer.status_code, answer.json()) == (401, expected)
    # A stream token opens one stream, never a listing.
    chat = CALLS["openai-chat"]
    created = httpx2.post(proxy + chat.path, json=chat.body,
                          headers=chat.headers("tokens=1"), timeout=30)
    token = created.headers["unbroken-stream-token"]
    answer = httpx2.get(proxy + "/v1/streams", headers={"unbroken-stream-token": token},
                        params={"token": token}, timeout=10)
    assert (answer.status_code, answer.json()) == (401, expected)


def test_filters_and_pages(proxy: str) -> None:
    key = "sk-test-listing-pages"
    chat = CALLS["openai-chat"]
    created = []
    for scenario in ("tokens=1", "tokens=2; drop_after=2", "tokens=1", "tokens=3; drop_after=2"):
        answer = httpx2.post(proxy + chat.path, json=chat.body,
                             headers=chat.headers(scenario, key=key), timeout=30)
        created.append(answer.headers["unbroken-stream-id"])
    newest = list(reversed(created))

    def ids(**params: str) -> tuple[list[str], str | None]:
        answer = own(proxy, key, **params)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        return [stream["id"] for stream in body["streams"]], body["next_cursor"]

    assert ids(status="interrupted") == ([newest[0], newest[2]], None)
    assert ids(status="completed,interrupted")[0] == newest
    assert own(proxy, key, header="authorization", status="failed").json()["streams"] == []
    first, cursor = ids(limit="3")
    assert first == newest[:3] and cursor is not None
    assert ids(limit="3", cursor=cursor) == ([newest[3]], None)
    first, cursor = ids(limit="1", status="interrupted")
    assert (first, ids(limit="1", status="interrupted", cursor=str(cursor))) == (
        [newest[0]], ([newest[2]], None))


@pytest.mark.parametrize(("params", "message"), [
    ({"limit": "0"}, "limit must be 1 to 1000, not 0"),
    ({"limit": "1001"}, "limit must be 1 to 1000, not 1001"),
    ({"limit": "ten"}, "limit must be 1 to 1000, not 'ten'"),
    ({"status": "done"}, "unknown status done; expected some of pending, streaming, completed, "
                         "truncated, filtered, interrupted, failed, cancelled"),
    ({"cursor": "bm90IGEgY3Vyc29y"}, "not a cursor of this listing: 'bm90IGEgY3Vyc29y'"),
])
def test_bad_queries_are_400(proxy: str, params: dict[str, str], message: str) -> None:
    answer = own(proxy, **params)
    assert (answer.status_code, answer.json()) == (400, {"error": {
        "message": f"unbroken proxy: {message}", "type": "invalid_request_error",
        "param": None, "code": None}})


def test_the_command_reads_a_redis_store(redis_url: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    from unbroken.finish import Status
    from unbroken.streams.journal import FrameRecord, RedisJournal, StreamMeta, StreamState

    store = redis_url + "?prefix=cli:"

    async def write() -> None:
        journal = RedisJournal(store)
        await journal.open()
        try:
            for n, status in enumerate((Status.COMPLETED, Status.INTERRUPTED), start=1):
                stream_id = f"ub_{n:024x}"
                await journal.create(
                    StreamMeta(stream_id=stream_id, dialect="ollama", created=1000.0 + n,
                               media_type="application/x-ndjson", token_hash="t" * 64,
                               credential_hash="c" * 64, request_path="/api/chat"),
                    StreamState(status=Status.STREAMING, updated=1000.0 + n))
                await journal.append(stream_id, [FrameRecord(1, None, b'{"done":false}', "hi",
                                                             1000.5 + n)],
                                     StreamState(status=status, updated=1001.0 + n,
                                                 last_seq=1))
        finally:
            await journal.close()

    asyncio.run(write())
    code, out, err = cli(capsys, "streams", "--store", store, "--json", "--status",
                         "interrupted")
    assert (code, err) == (0, "")
    assert [json.loads(line) for line in out.splitlines()] == [{
        "id": f"ub_{2:024x}", "created": 1002.0, "updated": 1003.0, "dialect": "ollama",
        "request_path": "/api/chat", "status": "interrupted", "finish_reason": None,
        "raw_finish_reason": None, "last_seq": 1, "upstream_requests": 1, "error": None,
        "usage": None,
        "usage_missing": "the stream ended interrupted before the upstream reported usage",
        "provider_id": None, "background": False}]
    code, out, err = cli(capsys, "streams", "--store", store, "--capture", f"ub_{2:024x}")
    assert (code, err) == (0, "")
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[2] == {"t": 0.5, "b": "eyJkb25lIjpmYWxzZX0K", "seq": 1}
    assert lines[-1] == {"end": "error", "error": "the stream ended interrupted",
                         "status": "interrupted", "finish_reason": None, "last_seq": 1,
                         "usage": None, "usage_missing": "the stream ended interrupted "
                                                         "before the upstream reported usage"}
