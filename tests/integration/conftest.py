"""Fixtures for integration tests: the mock upstream under a real uvicorn server."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest
from tests.servers import serve_in_thread

from unbroken.mock import create_app


@pytest.fixture(scope="session")
def mock_server_session() -> Iterator[str]:
    with serve_in_thread(create_app()) as base_url:
        yield base_url


@pytest.fixture
def mock_server(mock_server_session: str) -> str:
    """Base URL of a running mock whose counters and stored responses were just reset."""
    response = httpx2.post(mock_server_session + "/_mock/reset", timeout=5)
    assert response.status_code == 200
    return mock_server_session
