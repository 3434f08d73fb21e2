"""The startup heap is frozen by the ``unbroken proxy`` command, never by the app itself (an
application that embeds ``create_app`` owns its own heap)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import httpx2
import pytest
from tests.integration.test_proxy_support import running_proxy

from unbroken.proxy.shutdown import freeze_startup_heap


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_freeze_startup_heap_moves_what_lives_out_of_the_collectors_way(unfrozen: None) -> None:
    assert gc.get_freeze_count() == 0
    alive = [object() for _ in range(10)]
    freeze_startup_heap()
    assert gc.get_freeze_count() >= len(alive)
    assert gc.get_count()[2] == 0  # the full collection before it left nothing pending


@pytest.mark.integration
def test_an_embedded_proxy_leaves_the_heap_alone(unfrozen: None, mock_server: str) -> None:
    with running_proxy(mock_server) as (proxy, _app):
        assert httpx2.get(proxy + "/healthz", timeout=5).status_code == 200
        assert gc.get_freeze_count() == 0
