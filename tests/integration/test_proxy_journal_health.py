"""``GET /healthz`` tells a load balancer when a replica's shared journal (Redis) went away."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import httpx2
import pytest
from tests.integration.test_proxy_support import CALLS, running_proxy
from tests.redis_server import running_redis

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
