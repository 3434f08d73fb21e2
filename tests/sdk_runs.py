"""One pass over a tracked SDK stream, as the SDK-wrapper tests drive it.

Each SDK's test file builds its own client and call and hands the tracked stream to ``drain``
(sync) or ``drain_async``; what the loop saw comes back as one ``Run``. ``SDKStreams`` names one
SDK's pair of runners and the few values it reports in its own words, so that behaviour the
SDKs share is tested once, parametrized over them (``tests/integration/test_sdk_streams.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import pytest

from unbroken.finish import FinishReason, Status
from unbroken.message import Message
from unbroken.sdk import AsyncTrackedStream, TrackedStream


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """What one stream gave: the SDK's objects, the message, and what the loop raised."""

    received: list[Any]
    message: Message
    raised: Exception | None
    tracked: Any


Runner = Callable[..., Awaitable[Run]]


def drain(tracked: TrackedStream[Any], stop_after: int | None = None) -> Run:
    """Iterate to the end, to an exception, or out of the loop after ``stop_after`` objects."""
    received: list[Any] = []
    raised: Exception | None = None
    try:
        for item in tracked:  # leaving this loop closes it (CPython finalizes at once)
            received.append(item)
            if len(received) == stop_after:
                break
    except Exception as exc:
        raised = exc
    return Run(received=received, message=tracked.message, raised=raised, tracked=tracked)


async def drain_async(tracked: AsyncTrackedStream[Any], stop_after: int | None = None) -> Run:
    """As ``drain``, inside ``async with``: an async loop left early is closed by its exit."""
    received: list[Any] = []
    raised: Exception | None = None
    async with tracked:
        try:
            async for item in tracked:
                received.append(item)
                if len(received) == stop_after:
                    break
        except Exception as exc:
            raised = exc
    return Run(received=received, message=tracked.message, raised=raised, tracked=tracked)


def ending(message: Message) -> tuple[Status, FinishReason | None, str | None]:
    return message.status, message.finish_reason, message.raw_finish_reason


@dataclass(frozen=True, slots=True, kw_only=True)
class SDKStreams:
    """One SDK run against the mock upstream: its sync and async runners, the mock plan it is
    given, and the values it names in its own words (raw finish reasons, the cut's exception).

    A runner takes ``(base_url, scenario, stop_after=None)``.
    """

    name: str
    run_sync: Callable[..., Run]
    run_async: Runner
    seed: int
    tokens: int
    stop_reason: str
    length_reason: str
    cut_error: type[Exception]

    def runner(self, mode: str) -> Runner:
        """The async runner, or the sync one in a worker thread (mode "sync")."""
        if mode == "async":
            return self.run_async

        async def in_thread(base_url: str, scenario: str, stop_after: int | None = None) -> Run:
            return await anyio.to_thread.run_sync(
                partial(self.run_sync, base_url, scenario, stop_after)
            )

        return in_thread


def run_fixture(sdk: SDKStreams) -> Any:
    """The ``run`` fixture of one SDK's test file: each test runs sync (in a worker thread),
    then async. Assign it as ``run = run_fixture(SDK)``."""

    @pytest.fixture(name="run", params=["sync", "async"])
    def run(request: pytest.FixtureRequest) -> Runner:
        return sdk.runner(request.param)

    return run
