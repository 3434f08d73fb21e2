"""Only the credential that created a stream, or its stream token, reads it; secrets are never
stored."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from tests.integration.test_proxy_support import CALLS, KEY, OTHER_KEY, running_proxy

pytestmark = pytest.mark.integration

SCENARIO = "seed=1; tokens=5"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("credentials") / "journal.db"


@pytest.fixture(scope="module")
def proxy(mock_server_session: str, store: Path) -> Iterator[str]:
    with running_proxy(mock_server_session, store=f"sqlite:///{store}") as (base_url, _app):
        yield base_url


@pytest.mark.parametrize("dialect", ["openai-chat", "anthropic", "gemini", "ollama"])
def test_another_credential_gets_404_everywhere(proxy: str, mock_server: str,
                                                dialect: str) -> None:
    call = CALLS[dialect]
    with httpx2.Client(base_url=proxy, timeout=10) as client:
        created = client.post(call.path, json=call.body, headers=call.headers(SCENARIO))
        stream_id = created.headers["unbroken-stream-id"]
        token = created.headers["unbroken-stream-token"]
        mine = call.headers(SCENARIO)
        other = call.headers(SCENARIO, OTHER_KEY)
        resume = {"Last-Event-ID": f"{stream_id}:2"}
        for headers, expected in ((mine, 200), (other, 404), ({}, 404)):
            status = client.get(f"/v1/streams/{stream_id}", headers=headers)
            assert status.status_code == expected
            events = client.get(f"/v1/streams/{stream_id}/events", headers=headers)
            assert events.status_code == expected
            again = client.post(call.path, json=call.body, headers=headers | resume)
            assert again.status_code == expected
            cancel = client.post(f"/v1/streams/{stream_id}/cancel", headers=headers)
            assert cancel.status_code == expected
        # The token works without the credential.
        by_token = client.get(f"/v1/streams/{stream_id}/events?token={token}")
        assert by_token.status_code == 200
        by_header = client.get(f"/v1/streams/{stream_id}",
                               headers={"Unbroken-Stream-Token": token})
        assert by_header.json()["status"] == "completed"
        # 404s carry the dialect's error format on its own endpoint.
        refused = client.post(call.path, json=call.body, headers=other | resume)
        if dialect == "anthropic":
            assert refused.json()["error"]["type"] == "not_found_error"
        elif dialect == "ollama":
            assert "no stream" in refused.json()["error"]
        else:
            assert "no stream" in refused.json()["error"]["message"]
    counts = httpx2.get(mock_server + "/_mock/requests").json()
    assert counts["generations"] == {call.path.split("?")[0]: 1}


def test_gemini_key_parameter_is_a_credential(proxy: str, mock_server: str) -> None:
    call = CALLS["gemini"]
    with httpx2.Client(base_url=proxy, timeout=10) as client:
        created = client.post(f"{call.path}&key={KEY}", json=call.body,
                              headers={"Unbroken-Mock": SCENARIO})
        stream_id = created.headers["unbroken-stream-id"]
        assert client.get(f"/v1/streams/{stream_id}?key={KEY}").status_code == 200
        assert client.get(f"/v1/streams/{stream_id}",
                          headers={"x-goog-api-key": KEY}).status_code == 200
        assert client.get(f"/v1/streams/{stream_id}?key={OTHER_KEY}").status_code == 404


def test_unknown_stream_is_404(proxy: str) -> None:
    with httpx2.Client(base_url=proxy, timeout=10) as client:
        sid = "ub_" + "0" * 24
        assert client.get(f"/v1/streams/{sid}", headers={"x-api-key": KEY}).status_code == 404
        post = client.post("/v1/chat/completions", json=CALLS["openai-chat"].body,
                           headers={"x-api-key": KEY, "Last-Event-ID": f"{sid}:3"})
        assert post.status_code == 404


def test_no_secret_reaches_the_journal_file(proxy: str, mock_server: str, store: Path) -> None:
    for dialect in ("openai-chat", "anthropic", "gemini"):
        call = CALLS[dialect]
        created = httpx2.post(proxy + call.path, json=call.body, headers=call.headers(SCENARIO),
                              timeout=10)
        token = created.headers["unbroken-stream-token"]
        assert token.encode() not in _journal_bytes(store)
    # Gemini's key in the query string: the upstream gets it, the journal does not.
    call = CALLS["gemini"]
    by_query = httpx2.post(f"{proxy}{call.path}&key={KEY}", json=call.body, timeout=10,
                           headers={"Unbroken-Mock": SCENARIO})
    assert by_query.status_code == 200
    assert KEY.encode() not in _journal_bytes(store)
    conn = sqlite3.connect(store)
    headers = [row[0] for row in conn.execute("SELECT response_headers FROM streams")]
    conn.close()
    assert headers and not any(KEY in text for text in headers)


def _journal_bytes(store: Path) -> bytes:
    data = b""
    for suffix in ("", "-wal", "-shm"):
        path = Path(f"{store}{suffix}")
        if path.exists():
            data += path.read_bytes()
    return data
