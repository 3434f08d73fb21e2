"""Idempotent create through a real proxy process: the same credential and ``Idempotency-Key``
attach to the stream the key created (live, ended, or after a restart) from its first frame,
with no second generation in the mock's counters; the same key with another body is 422."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2
import openai
import pytest
from tests.integration.hardening_process import ProxyProcess
from tests.integration.test_proxy_support import (
    CALLS,
    KEY,
    OTHER_KEY,
    message_of,
    mock_counts,
    proxy_config,
)
from tests.servers import serve_in_thread

from unbroken.mock import reply_text
from unbroken.proxy import create_app
from unbroken.streams.journal import MemoryJournal

pytestmark = pytest.mark.integration

MESSAGES = [{"role": "user", "content": "hi"}]
SCENARIO = "seed=41; tokens=8; delay_ms=20"
FULL = reply_text(41, 8)
CHAT = {"/v1/chat/completions": 1}


@pytest.fixture(scope="module")
def proxy(mock_server_session: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory = Path(tmp_path_factory.mktemp("idempotency"))
    with ProxyProcess.start(mock_server_session, directory / "journal.db",
                            directory / "proxy.log", "--log-level", "warning") as process:
        yield process.base_url


def _sdk_text(proxy: str, key: str, idempotency_key: str, content: str = "hi") -> str:
    with openai.OpenAI(base_url=proxy + "/v1", api_key=key, max_retries=0) as client:
        chunks = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": content}], stream=True,
            extra_headers={"Idempotency-Key": idempotency_key, "Unbroken-Mock": SCENARIO},
        )
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_a_double_click_attaches_to_the_live_stream(proxy: str, mock_server: str) -> None:
    with openai.OpenAI(base_url=proxy + "/v1", api_key=KEY, max_retries=0) as client:
        first = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True,
            extra_headers={"Idempotency-Key": "click-1", "Unbroken-Mock": SCENARIO},
        )
        iterator = iter(first)
        head = [next(iterator) for _ in range(3)]
        # The second request arrives while the first stream is live: from its first frame.
        assert _sdk_text(proxy, KEY, "click-1") == FULL
        rest = list(iterator)
    assert "".join(c.choices[0].delta.content or "" for c in head + rest if c.choices) == FULL
    assert mock_counts(mock_server)["generations"] == CHAT


def test_an_ended_stream_is_retained_for_its_key(proxy: str, mock_server: str) -> None:
    assert _sdk_text(proxy, KEY, "retained-1") == FULL
    # A hand-written request with the same JSON in another key order is the same request.
    again = httpx2.post(proxy + "/v1/chat/completions", timeout=10,
                        json={"stream": True, "messages": MESSAGES, "model": "m"},
                        headers=CALLS["openai-chat"].headers(SCENARIO)
                        | {"Idempotency-Key": "retained-1"})
    assert again.headers["idempotent-replayed"] == "true"
    assert message_of("openai-chat", again.content).text == FULL
    assert mock_counts(mock_server)["generations"] == CHAT


def test_the_same_key_with_another_body_is_422(proxy: str, mock_server: str) -> None:
    assert _sdk_text(proxy, KEY, "changed-1") == FULL
    with pytest.raises(openai.UnprocessableEntityError) as changed:
        _sdk_text(proxy, KEY, "changed-1", content="something else")
    assert changed.value.status_code == 422
    assert "unbroken proxy: this Idempotency-Key was used with a different request" in str(
        changed.value)
    assert mock_counts(mock_server)["generations"] == CHAT


def test_a_key_belongs_to_its_credential(proxy: str, mock_server: str) -> None:
    assert _sdk_text(proxy, KEY, "shared-1") == FULL
    assert _sdk_text(proxy, OTHER_KEY, "shared-1") == FULL  # another credential: its own
    assert mock_counts(mock_server)["generations"] == {"/v1/chat/completions": 2}


def test_two_requests_at_once_make_one_stream(proxy: str, mock_server: str) -> None:
    barrier = threading.Barrier(2)
    call = CALLS["anthropic"]

    def post(_n: int) -> tuple[str, str]:
        barrier.wait()
        response = httpx2.post(proxy + call.path, timeout=10, json=call.body,
                               headers=call.headers(SCENARIO) | {"Idempotency-Key": "twin-1"})
        assert response.status_code == 200
        return (response.headers["unbroken-stream-id"],
                message_of("anthropic", response.content).text)

    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = list(pool.map(post, range(2)))
    assert answers[0] == answers[1]
    assert answers[0][1] == FULL
    assert mock_counts(mock_server)["generations"] == {"/v1/messages": 1}


def test_a_restarted_proxy_still_knows_the_key(tmp_path: Path, mock_server: str) -> None:
    store, log = tmp_path / "journal.db", tmp_path / "proxy.log"
    with ProxyProcess.start(mock_server, store, log, "--log-level", "warning") as process:
        assert _sdk_text(process.base_url, KEY, "restart-1") == FULL
    # The journal holds the key's hash, never the key.
    for path in (store, Path(f"{store}-wal")):
        if path.exists():
            assert b"restart-1" not in path.read_bytes()
    with ProxyProcess.start(mock_server, store, log, "--log-level", "warning") as process:
        assert _sdk_text(process.base_url, KEY, "restart-1") == FULL
    assert mock_counts(mock_server)["generations"] == CHAT


class _KeyHeldElsewhere(MemoryJournal):
    """A journal shared with a replica that holds every key and never creates its stream."""

    async def claim_idempotent(self, idempotency_hash: str, claimer: str, ttl: float,
                               replacing: str | None = None) -> bool:
        return False


def test_a_key_held_by_another_replica_past_every_timeout_is_409(mock_server: str) -> None:
    config = proxy_config(mock_server, connect_timeout=0.1, read_timeout=0.1, lease_ttl=0.2,
                          lease_renew=0.1)
    app = create_app(config, journal=_KeyHeldElsewhere())
    call = CALLS["openai-chat"]
    with serve_in_thread(app) as proxy:
        response = httpx2.post(proxy + call.path, json=call.body, timeout=10,
                               headers=call.headers("tokens=3") | {"Idempotency-Key": "held"})
    assert response.status_code == 409
    assert response.json()["error"]["message"] == (
        "unbroken proxy: another request with this Idempotency-Key is being started; retry")
    assert mock_counts(mock_server)["generations"] == {}
