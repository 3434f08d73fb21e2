"""A replica's shared journal (Redis) failing: ``GET /healthz`` says so to a load balancer, and
a reader whose stream Redis lost gets an error frame, not a quiet end."""

from __future__ import annotations

import asyncio
import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx2
import pytest
import redis
from tests.integration.test_proxy_support import CALLS, FrameReader, running_proxy
from tests.redis_server import running_redis

from unbroken.client import Retry, astream, stream
from unbroken.errors import Interrupted, UpstreamStatusError
from unbroken.finish import Status

pytestmark = pytest.mark.integration


def test_healthz_is_503_while_redis_is_gone(tmp_path: Path, mock_server: str) -> None:
    chat = CALLS["openai-chat"]
    with ExitStack() as stack:
        redis = ExitStack()
        stack.callback(redis.close)  # stopped below; stopped anyway if the test fails first
        url = redis.enter_context(running_redis(tmp_path / "redis"))
        proxy, _app = stack.enter_context(running_proxy(mock_server, store=url))
        ok = httpx2.get(proxy + "/healthz", timeout=10)
        assert (ok.status_code, ok.json()) == (200, {"status": "ok", "live_streams": 0})
        created = httpx2.post(proxy + chat.path, json=chat.body,
                              headers=chat.headers("tokens=3"), timeout=10)
        assert created.status_code == 200
        redis.close()
        gone = httpx2.get(proxy + "/healthz", timeout=10)
        assert gone.status_code == 503
        body = gone.json()
        assert body["status"] == "journal unavailable"
        assert body["error"].startswith("Redis")


def test_a_stream_lost_by_redis_ends_its_readers_with_an_error_frame(
    tmp_path: Path, mock_server: str,
) -> None:
    """A Redis that loses its data mid-stream (restarted without persistence, flushed): the
    producer's next append is refused, and the reader gets the dialect's error frame last."""
    chat = CALLS["openai-chat"]
    with running_redis(tmp_path / "redis") as url, running_proxy(mock_server, store=url) as (
        proxy, _app
    ), httpx2.stream("POST", proxy + chat.path, json=chat.body, timeout=20,
                     headers=chat.headers("seed=2; tokens=250; delay_ms=40")) as response:
        stream_id = response.headers["unbroken-stream-id"]
        reader = FrameReader(response, "openai-chat")
        head = reader.take(3)
        assert [frame.id for frame in head] == [f"{stream_id}:{n}" for n in (1, 2, 3)]
        flushed = redis.Redis.from_url(url)
        try:
            assert flushed.flushall() is True
        finally:
            flushed.close()
        rest = reader.rest()
    assert rest, "the response ended without its error frame"
    error = json.loads(rest[-1].data)["error"]
    assert error["code"] == "stream_incomplete"
    assert error["message"] == (
        f"unbroken proxy: this response ended before stream {stream_id} did (it is no longer "
        f"in the journal); reconnect with Last-Event-ID to read on, or see "
        f"GET /v1/streams/{stream_id}")
    assert all(frame.id.startswith(f"{stream_id}:") for frame in rest)
    assert error["unbroken"] == {"code": "stream_incomplete", "status": "unknown",
                                 "resumable": "true"}


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_unbroken_stream_reads_the_notice_as_interrupted_and_tries_to_read_on(
    tmp_path: Path, mock_server: str, flavour: str,
) -> None:
    """The notice is not the provider's error: the client keeps the prefix, resumes by
    Last-Event-ID (the journal has lost the stream: 404) and ends ``interrupted``."""
    chat = CALLS["openai-chat"]
    texts: list[str] = []
    with running_redis(tmp_path / "redis") as url, running_proxy(mock_server, store=url) as (
        proxy, _app
    ):
        def flush_at_the_third(text: str) -> None:
            texts.append(text)
            if len(texts) == 3:
                flushed = redis.Redis.from_url(url)
                try:
                    assert flushed.flushall() is True
                finally:
                    flushed.close()

        options: dict[str, Any] = {
            "dialect": "openai-chat", "json": chat.body, "retry": Retry(backoff=0.01),
            "headers": chat.headers("seed=2; tokens=250; delay_ms=40")}
        if flavour == "sync":
            with stream("POST", proxy + chat.path, **options) as s:
                with pytest.raises(Interrupted) as raised:
                    for text in s.iter_text():
                        flush_at_the_third(text)
        else:
            async def main() -> Any:
                async with astream("POST", proxy + chat.path, **options) as s:
                    with pytest.raises(Interrupted) as raised:
                        async for text in s.iter_text():
                            await asyncio.to_thread(flush_at_the_third, text)
                    return s, raised
            s, raised = asyncio.run(main())
    message = s.message
    assert message.status is Status.INTERRUPTED  # never the provider's "failed"
    assert message.text == "".join(texts) and len(texts) >= 3
    assert [w.code for w in message.warnings if w.code.startswith("proxy")] == ["proxy_notice"]
    # The resume found no stream: a final 404, which ends it (Interrupted[UpstreamStatusError]).
    assert isinstance(raised.value, UpstreamStatusError) and raised.value.status == 404
    assert s.connections == 2
