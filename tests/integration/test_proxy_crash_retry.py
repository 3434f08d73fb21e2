"""The default retry spans a restart: ``unbroken.stream`` with ``Retry()`` reads a proxied stream
through 4 s during which every connection is cut at once (a proxy restarting behind a relay, a
load balancer failing over), then resumes and ends ``completed``, one generation, SSE and NDJSON
alike. Without the time budget (``Retry(budget=None)``: 3 attempts, about 1.5 s, or 3 s with the
proxy's ``retry: 1000`` hint) the same outage ends it ``interrupted``.
"""

from __future__ import annotations

import time

import pytest
from tests.fault_relay import Fault, FaultRelay
from tests.integration.test_proxy_support import CALLS, mock_counts, running_proxy

import unbroken
from unbroken.events import TextDelta
from unbroken.finish import Status
from unbroken.mock import reply_text

pytestmark = pytest.mark.integration

OUTAGE_S = 4.0


def read_through_an_outage(proxy: str, dialect: str, retry: unbroken.Retry) -> unbroken.Message:
    call = CALLS[dialect]
    port = int(proxy.rpartition(":")[2])
    outage_until = 0.0

    def plan(_index: int) -> list[Fault]:
        # A connection that starts during the outage is cut before any byte of an answer.
        return [Fault.reset(after=0)] if time.monotonic() < outage_until else []

    with FaultRelay(port, plan=plan) as relay:
        with unbroken.stream(
            "POST", relay.url + call.path, json=call.body, dialect=dialect,
            headers=call.headers("seed=12; tokens=30; delay_ms=100"), retry=retry,
            raise_on_error=False,
        ) as stream:
            texts = 0
            for event in stream:
                if isinstance(event, TextDelta):
                    texts += 1
                    if texts == 3:  # the restart begins: open connections cut too
                        outage_until = time.monotonic() + OUTAGE_S
                        relay.reset_all()
        assert stream.connections >= 3
        return stream.message


@pytest.mark.parametrize("dialect", ["openai-chat", "ollama"])
def test_the_default_retry_reads_through_a_restart(mock_server: str, dialect: str) -> None:
    with running_proxy(mock_server) as (proxy, _app):
        message = read_through_an_outage(proxy, dialect, unbroken.Retry())
    assert (message.status, message.text) == (Status.COMPLETED, reply_text(12, 30))
    assert message.duplicates == 0
    assert sum(mock_counts(mock_server)["generations"].values()) == 1


@pytest.mark.parametrize("dialect", ["openai-chat", "ollama"])
def test_attempts_alone_give_up_during_the_restart(mock_server: str, dialect: str) -> None:
    with running_proxy(mock_server) as (proxy, _app):
        message = read_through_an_outage(proxy, dialect, unbroken.Retry(budget=None))
    assert message.status is Status.INTERRUPTED
    assert message.text == reply_text(12, 30)[: len(message.text)]
    assert sum(mock_counts(mock_server)["generations"].values()) == 1
