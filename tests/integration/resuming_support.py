"""Shared pieces of the ResumingTransport tests (this module holds no tests).

A real proxy in front of the real mock, and a ``FaultRelay`` between the client and the proxy
that breaks the first connection (the streaming POST) as a fault says; the resume's connection
goes through unharmed. ``FAULTS`` names the breaks; ``BREAKS`` are those that cut the body.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest
from tests.fault_relay import Cut, Fault, FaultRelay
from tests.integration.test_proxy_support import mock_counts, proxy_config
from tests.servers import serve_in_thread

from unbroken.client import Deadlines, Retry
from unbroken.framing import SSEDecoder
from unbroken.proxy import create_app

SEED, TOKENS = 5, 30
SCENARIO = f"seed={SEED}; tokens={TOKENS}; delay_ms=2"
# Past the response head (~300 bytes) and a few frames into the body.
AT = 700
FAULTS: dict[str, Sequence[Fault]] = {
    "reset-inside-char": [Fault.reset(after=AT, cut=Cut.INSIDE_CHAR)],
    "reset-mid-frame": [Fault.reset(after=AT, cut=Cut.INSIDE_LINE)],
    "half-close": [Fault.half_close(after=AT, cut=Cut.INSIDE_LINE)],
    "stall": [Fault.stall(seconds=5.0, after=AT, cut=Cut.INSIDE_LINE)],
    "trickle": [Fault.trickle(nbytes=300, seconds=0.0005, after=AT - 200)],
}
BREAKS = ("reset-inside-char", "reset-mid-frame", "half-close", "stall")
KIND = {"reset-inside-char": "reset", "reset-mid-frame": "reset", "half-close": "half_close",
        "stall": "stall", "trickle": "trickle"}
# A stall is a cut once no byte came for this long; small, so that the tests stay short.
DEADLINES = Deadlines(connect=5, idle=1.0, total=30)
RETRY = Retry(attempts=3, backoff=0.05, max_backoff=0.2)


@pytest.fixture(scope="module")
def proxy_url(mock_server_session: str) -> Iterator[str]:
    app = create_app(proxy_config(mock_server_session, keepalive=0.05))
    with serve_in_thread(app) as base_url:
        yield base_url


@contextmanager
def relay_to(proxy: str, faults: Sequence[Fault]) -> Iterator[FaultRelay]:
    """A relay to ``proxy`` whose first connection carries ``faults``."""
    port = int(proxy.rsplit(":", 1)[1])
    with FaultRelay(port, plan=lambda n: faults if n == 0 else (), lifetime=120) as relay:
        yield relay


def generations(mock: str) -> int:
    return sum(mock_counts(mock)["generations"].values())


def assert_whole_frames(pieces: list[bytes]) -> None:
    """Each piece handed to the caller ends at a frame's end (SSE or NDJSON alike: an NDJSON
    piece ends at LF, which an SSE decoder sees as a line end it may hold, never a cut)."""
    for piece in pieces:
        assert piece.endswith(b"\n"), piece[-40:]
        piece.decode()  # never half a character
        decoder = SSEDecoder()
        decoder.receive_data(piece)
        if not piece.lstrip(b"\n").startswith(b"{"):
            assert decoder.bytes_dispatched == len(piece), piece[-40:]
