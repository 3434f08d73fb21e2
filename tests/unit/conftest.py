"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from unbroken.streams.journal import Journal, journal_for


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def journal(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Journal]:
    """Each journal in turn: memory, a real SQLite file, a real redis-server. Its live tail
    holds 4 frames, so that a reader falling behind catches up from storage."""
    if request.param == "redis":
        store: str = request.getfixturevalue("redis_url")
    else:
        store = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'j.db'}"
    opened = journal_for(store, tail_frames=4)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()
