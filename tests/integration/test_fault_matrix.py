"""The fault matrix: 5 dialects x 7 upstream faults x 3 client disconnects, through the proxy.

Each case streams one request through the proxy (real uvicorn, real SQLite file) from the mock
with one upstream fault, reads ``k`` frames, hangs up, resumes with ``Last-Event-ID:
<stream_id>:<k>`` on the same POST, and joins the two bodies. It must end with:

- the frames numbered 1..D exactly once (ids where the wire has them, counts where it has not);
- exactly the text the upstream delivered: all of ``reply_text`` when the stream completes (a
  stall, a drop after the finish reason, or any drop of a Responses *background* stream, which
  the proxy continues upstream with ``starting_after``), else the exact prefix before the fault,
  with status ``interrupted`` (a drop) or ``failed`` (an error event);
- one generation in the mock's counters.

Upstream faults, in frames of the mock's layout: a drop before the first frame (headers only; a
Responses stream then has no id to resume by), after the first frame, in the middle of the text,
before the last frame; a drop inside a text frame (after its first byte of a multi-byte
character); a short stall; an error event in place of a middle text frame. The client hangs up
after its first frame, its middle one, or before its last one, while the upstream is still
sending (5 ms between frames), so the resume joins the live tail. One proxy per dialect serves
all 21 of its cases; the mock's counters are reset per case.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from tests.integration.test_proxy_support import (
    CALLS,
    DIALECTS,
    KEY,
    Call,
    FrameReader,
    frames_of,
    message_of,
    mock_counts,
    running_proxy,
    stream_status,
)

from unbroken.mock import reply_text

pytestmark = pytest.mark.integration

TOKENS = 6
DELAY_MS = 5  # between frames: the client hangs up while the stream is still live
FAULTS = ("drop_at_start", "drop_first", "drop_middle", "drop_last", "drop_inside", "stall",
          "error_event")
DISCONNECTS = ("first", "middle", "last")
BACKGROUND = {"model": "m", "stream": True, "input": "hi", "background": True}


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one case must end with: status, text and the number of frames D the client sees."""

    status: str
    text: str
    frames: int


def _scenario(call: Call, fault: str, seed: int) -> tuple[str, int]:
    """The mock scenario of a fault, and the frame number the fault is placed at."""
    total = call.total(TOKENS)
    middle = call.first_text + TOKENS // 2 - 1  # a text frame in the middle of the text
    base = f"seed={seed}; tokens={TOKENS}; delay_ms={DELAY_MS}"
    placed = {
        "drop_at_start": ("drop_after=0", 0),
        "drop_first": ("drop_after=1", 1),
        "drop_middle": (f"drop_after={middle}", middle),
        "drop_last": (f"drop_after={total - 1}", total - 1),
        "drop_inside": (f"drop_after={middle}; drop_mid=1", middle),
        "stall": (f"stall_after={middle}; stall_s=0.2", middle),
        "error_event": (f"error_at={middle}", middle),
    }[fault]
    return f"{base}; {placed[0]}", placed[1]


def _expected(call: Call, fault: str, at: int, seed: int) -> Outcome:
    total = call.total(TOKENS)
    full = reply_text(seed, TOKENS)
    if fault == "stall" or (call.dialect == "openai-responses" and fault.startswith("drop")
                            and at > 0):  # a background stream with a known id goes on
        return Outcome("completed", full, total)
    if fault == "error_event":  # frames 1..at-1, then the upstream's own error as frame `at`
        return Outcome("failed", call.text_after(seed, TOKENS, at - 1), at)
    # A drop after `at` whole frames: completed if the finish reason was among them (chat's
    # finish chunk precedes [DONE]; Anthropic's message_delta precedes message_stop), else
    # interrupted with the proxy's error frame as frame at + 1.
    finish_frame = {"openai-chat": total - 1, "anthropic": total - 1}.get(call.dialect, total)
    if at >= finish_frame:
        return Outcome("completed", full, at)
    return Outcome("interrupted", call.text_after(seed, TOKENS, at), at + 1)


def _disconnect_after(disconnect: str, frames: int) -> int:
    return {"first": 1, "middle": max(1, frames // 2), "last": max(1, frames - 1)}[disconnect]


@pytest.fixture(scope="module")
def proxies(mock_server_session: str,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One proxy per dialect, each on its own SQLite file, all in front of the session mock."""
    started: dict[str, str] = {}
    stack: list[Any] = []
    try:
        for dialect in DIALECTS:
            store = Path(tmp_path_factory.mktemp(f"matrix-{dialect}")) / "journal.db"
            context = running_proxy(mock_server_session, store=f"sqlite:///{store}")
            base_url, _app = context.__enter__()
            stack.append(context)
            started[dialect] = base_url
        yield started
    finally:
        for context in reversed(stack):
            context.__exit__(None, None, None)


@pytest.mark.parametrize("disconnect", DISCONNECTS)
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("dialect", DIALECTS)
def test_fault_matrix(proxies: dict[str, str], mock_server: str, dialect: str, fault: str,
                      disconnect: str) -> None:
    call = CALLS[dialect]
    seed = 100 + FAULTS.index(fault) * 10 + DISCONNECTS.index(disconnect)
    scenario, at = _scenario(call, fault, seed)
    expected = _expected(call, fault, at, seed)
    body = BACKGROUND if dialect == "openai-responses" else call.body
    headers = call.headers(scenario)
    proxy = proxies[dialect]
    k = _disconnect_after(disconnect, expected.frames)

    with httpx2.stream("POST", proxy + call.path, json=body, headers=headers,
                       timeout=10) as first:
        assert first.status_code == 200
        stream_id = first.headers["unbroken-stream-id"]
        kept = FrameReader(first, dialect).take(k)
    # Hung up after k frames; the same POST resumes after seq k (no upstream request).
    resumed = httpx2.post(proxy + call.path, json=body, timeout=10,
                          headers=headers | {"Last-Event-ID": f"{stream_id}:{k}"})
    assert resumed.status_code == 200
    rest = frames_of(dialect, resumed.content)
    frames = kept + rest

    # Every frame exactly once, in order.
    assert len(frames) == expected.frames
    if dialect not in ("gemini", "ollama"):
        assert [frame.id for frame in frames] == [
            f"{stream_id}:{n}" for n in range(1, expected.frames + 1)
        ]
    joined = b"".join(frame.raw for frame in kept) + b"".join(frame.raw for frame in rest)
    message = message_of(dialect, joined)
    assert message.text == expected.text
    assert message.duplicates == 0
    status = stream_status(proxy, stream_id, KEY)
    assert (status["status"], status["text"], status["last_seq"]) == (
        expected.status, expected.text, expected.frames
    )
    counts = mock_counts(mock_server)
    assert counts["generations"] == {call.path.partition("?")[0]: 1}
    if dialect == "openai-responses" and fault.startswith("drop") and at > 0:
        assert counts["resumes"] == {"/v1/responses": 1}
    else:
        assert counts.get("resumes", {}) == {}
