"""Idempotent create through a real proxy process: the same credential and ``Idempotency-Key``
attach to the stream the key created (live, ended, or after a restart) from its first frame,
with no second generation in the mock's counters; the same key with another body is 422."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2
import openai
import pytest
from tests.integration.hardening_process import ProxyProcess
from tests.integration.test_proxy_support import CALLS, KEY, OTHER_KEY, message_of, mock_counts

from unbroken.mock import reply_text

pytestmark = pytest.mark.integration

MESSAGES = [{"role": "user", "content": "hi"}]
SCENARIO = "seed=41; tokens=8; delay_ms=20"


def _sdk_text(proxy: str, key: str, idempotency_key: str, content: str = "hi") -> str:
    with openai.OpenAI(base_url=proxy + "/v1", api_key=key, max_retries=0) as client:
        chunks = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": content}], stream=True,
            extra_headers={"Idempotency-Key": idempotency_key, "Unbroken-Mock": SCENARIO},
        )
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_a_repeated_create_attaches_and_a_changed_body_is_422(tmp_path: Path,
                                                              mock_server: str) -> None:
    store, log = tmp_path / "journal.db", tmp_path / "proxy.log"
    full = reply_text(41, 8)
    with ProxyProcess.start(mock_server, store, log, "--log-level", "warning") as process:
        proxy = process.base_url
        # A double click: the second request arrives while the first stream is live.
        with openai.OpenAI(base_url=proxy + "/v1", api_key=KEY, max_retries=0) as client:
            first = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True,
                extra_headers={"Idempotency-Key": "order-1", "Unbroken-Mock": SCENARIO},
            )
            iterator = iter(first)
            head = [next(iterator) for _ in range(3)]
            assert _sdk_text(proxy, KEY, "order-1") == full  # from the first frame
            rest = list(iterator)
        text = "".join(c.choices[0].delta.content or "" for c in head + rest if c.choices)
        assert text == full
        assert mock_counts(mock_server)["generations"] == {"/v1/chat/completions": 1}

        # Once ended, the stream is still retained: the key attaches again.
        again = httpx2.post(proxy + "/v1/chat/completions", timeout=10,
                            json={"model": "m", "messages": MESSAGES, "stream": True},
                            headers=CALLS["openai-chat"].headers(SCENARIO)
                            | {"Idempotency-Key": "order-1"})
        assert again.headers["idempotent-replayed"] == "true"
        assert message_of("openai-chat", again.content).text == full

        # The same key with a different body is a mistake: 422, in OpenAI's error shape.
        with pytest.raises(openai.UnprocessableEntityError) as changed:
            _sdk_text(proxy, KEY, "order-1", content="something else")
        assert changed.value.status_code == 422
        assert "Idempotency-Key was used with a different request" in str(changed.value)
        assert mock_counts(mock_server)["generations"] == {"/v1/chat/completions": 1}

        # A key belongs to its credential: another one with the same key generates anew.
        assert _sdk_text(proxy, OTHER_KEY, "order-1") == full
        assert mock_counts(mock_server)["generations"] == {"/v1/chat/completions": 2}

        # Two requests at the same moment with a new key: one stream, one generation.
        barrier = threading.Barrier(2)

        def post() -> tuple[str, str]:
            barrier.wait()
            response = httpx2.post(
                proxy + "/v1/messages", timeout=10, json=CALLS["anthropic"].body,
                headers=CALLS["anthropic"].headers(SCENARIO) | {"Idempotency-Key": "order-2"})
            assert response.status_code == 200
            return (response.headers["unbroken-stream-id"],
                    message_of("anthropic", response.content).text)

        with ThreadPoolExecutor(max_workers=2) as pool:
            answers = list(pool.map(lambda _n: post(), range(2)))
        assert answers[0] == answers[1]
        assert answers[0][1] == full
        assert mock_counts(mock_server)["generations"] == {
            "/v1/chat/completions": 2, "/v1/messages": 1}

    # A restarted proxy still knows the key (the journal holds its hash, never the key).
    for path in (store, Path(f"{store}-wal")):
        if path.exists():
            assert b"order-1" not in path.read_bytes()
    with ProxyProcess.start(mock_server, store, log, "--log-level", "warning") as process:
        assert _sdk_text(process.base_url, KEY, "order-1") == full
    assert mock_counts(mock_server)["generations"] == {
        "/v1/chat/completions": 2, "/v1/messages": 1}
