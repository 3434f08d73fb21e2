"""WHATWG HTML "Interpreting an event stream": every case in sse/whatwg.json, under every chunking.

The cases were written from the spec's parsing rules, not from the decoder's output. Each runs
along every route the decoder has (``SSE_PATHS``). Inputs are
text (encoded as UTF-8), ``input_hex``, ``input_b64`` or ``input_repeat`` (a long line built from
a prefix, a repeated unit and a suffix). Cases with invalid UTF-8 use ``errors="replace"``, which
is what the spec's "UTF-8 decode" does.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from tests.chunkings import SSE_PATHS, sse_decoder, sse_paths, sse_state, tr

from unbroken import SSEDecoder

CASES: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "sse" / "whatwg.json").read_text(encoding="utf-8")
)


def case_input(case: dict[str, Any]) -> bytes:
    if "input_hex" in case:
        return bytes.fromhex(case["input_hex"])
    if "input_b64" in case:
        return base64.b64decode(case["input_b64"])
    if "input_repeat" in case:
        spec = case["input_repeat"]
        line: str = spec["prefix"] + spec["unit"] * spec["count"] + spec["suffix"]
        return line.encode("utf-8")
    text: str = case["input"]
    return text.encode("utf-8")


def expected_event(event: dict[str, Any]) -> tuple[str, str, str, str | None, int | None]:
    data = event["data_repeat"]["unit"] * event["data_repeat"]["count"] if (
        "data_repeat" in event
    ) else event["data"]
    return (event["event"], data, event["id"], event["block_id"], event["retry"])


def expected_unterminated(case: dict[str, Any]) -> bytes:
    if "unterminated_hex" in case:
        return bytes.fromhex(case["unterminated_hex"])
    text: str = case["unterminated"]
    return text.encode("utf-8")


def test_case_names_are_unique() -> None:
    names = [case["name"] for case in CASES]
    assert len(names) == len(set(names)) == 77


@pytest.mark.parametrize("path", SSE_PATHS)
@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_whatwg_case(case: dict[str, Any], path: str) -> None:
    data = case_input(case)

    def make() -> SSEDecoder:
        return sse_decoder(
            errors=case.get("errors", "strict"),
            last_event_id=case.get("initial_last_event_id", ""),
        )

    with sse_paths(path):
        outcome = tr(make, data, sse_state)

    assert outcome.error is None
    got = [(ev.event, ev.data, ev.id, ev.block_id, ev.retry) for ev in outcome.frames]
    assert got == [expected_event(event) for event in case["events"]]
    assert outcome.state == (
        case["last_event_id"],
        case["reconnection_time"],
        expected_unterminated(case),
    )
