"""Provider bodies with golden outcomes, replayed whole, byte by byte and in random chunkings.

Each ``dialects/<dialect>/<name>.sse`` (or ``.ndjson``) has a sibling ``<name>.json`` written from
the provider's reference, not from our output: ``status``, ``finish_reason``,
``raw_finish_reason``, ``text``, ``reasoning``, ``tool_calls`` and ``usage``. Bodies whose golden
names a ``source`` are copied byte for byte from that documentation page.

The frames are folded here with a small local fold (the dialect layer alone); when
``unbroken.parse`` exists, the same body also goes through it and must give the same outcome.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from unbroken.dialects import DIALECT_NAMES, get_dialect
from unbroken.events import ErrorEvent, Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage
from unbroken.framing import DEFAULT_MAX_EVENT_SIZE

HERE = Path(__file__).parent / "dialects"
GOLDENS = sorted(HERE.glob("*/*.json"))
USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "reasoning_tokens",
    "cached_tokens",
)


def body_of(golden: Path) -> bytes:
    [body] = [p for p in golden.parent.glob(golden.stem + ".*") if p.suffix != ".json"]
    return body.read_bytes()


def chunkings(body: bytes) -> Iterator[tuple[str, list[bytes]]]:
    yield "whole", [body]
    yield "bytewise", [body[i : i + 1] for i in range(len(body))]
    rng = random.Random(len(body))  # seeded by the body: reproducible
    for round_ in range(3):
        cuts = sorted(rng.sample(range(1, len(body)), min(len(body) - 1, 1 + len(body) // 37)))
        yield (
            f"random{round_}",
            [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)],
        )


def fold(dialect_name: str, chunks: list[bytes]) -> dict[str, Any]:
    """The outcome design.md describes, from the dialect's events alone."""
    dialect = get_dialect(dialect_name)
    decoder = dialect.framing.new_decoder(DEFAULT_MAX_EVENT_SIZE)
    frames: list[Any] = []
    for chunk in chunks:
        frames += decoder.receive_data(chunk)
    frames += decoder.receive_eof()
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    at_index: dict[int, dict[str, Any]] = {}
    by_id: dict[str, dict[str, Any]] = {}
    usage: dict[str, Any] | None = None
    finish: Finish | None = None
    error: ErrorEvent | None = None
    for position, frame in enumerate(frames, start=1):
        payload = dialect.load(frame)
        seq = dialect.provider_seq(payload)
        for event in dialect.events(frame, payload, position if seq is None else seq):
            if isinstance(event, TextDelta):
                text.append(event.text)
            elif isinstance(event, ReasoningDelta):
                reasoning.append(event.text)
            elif isinstance(event, ToolCallDelta):
                # a call is named by its id, else by its index; a new id at an index another
                # call holds is a call of its own (Ollama gives every parallel call index 0)
                call = by_id.get(event.id) if event.id else None
                if call is None:
                    call = at_index.get(event.index)
                    if call is None or (event.id and call["id"] not in (None, event.id)):
                        call = {"id": None, "name": None, "arguments": ""}
                        calls.append(call)
                        at_index[event.index] = call
                if event.id:
                    by_id.setdefault(event.id, call)
                call["id"] = call["id"] or event.id
                call["name"] = call["name"] or event.name
                call["arguments"] += event.arguments
            elif isinstance(event, Usage):
                usage = usage or dict.fromkeys(USAGE_FIELDS)
                for field in USAGE_FIELDS:
                    if getattr(event, field) is not None:
                        usage[field] = getattr(event, field)
            elif isinstance(event, Finish):
                finish = finish or event  # the first finish reason stands
            elif isinstance(event, ErrorEvent):
                error = error or event
    if error is not None:
        status, reason, raw = "failed", "error", error.type
    elif finish is not None:
        status, reason, raw = finish.status.value, finish.reason.value, finish.raw
    else:
        status, reason, raw = "interrupted", None, None
    return {
        "status": status,
        "finish_reason": reason,
        "raw_finish_reason": raw,
        "text": "".join(text),
        "reasoning": "".join(reasoning),
        "tool_calls": calls,
        "usage": usage,
    }


def expected_of(golden: Path) -> dict[str, Any]:
    expected = json.loads(golden.read_text(encoding="utf-8"))
    expected.pop("comment")
    expected.pop("source", None)
    return dict(expected)


# Dialects whose provider documents no body that could be copied byte for byte, and what stands
# in for it.
UNDOCUMENTED: dict[str, str] = {
    "bedrock-converse": "AWS documents the events' JSON, never a binary body: the framing is "
    "checked against AWS's event-stream test vectors (test_eventstream_vectors) and boto3 reads "
    "the same encoder's bytes (test_bedrock_boto3)",
    "bedrock-invoke": "AWS documents a chunk's shape (PayloadPart.bytes), never a binary body: "
    "the bodies wrap Anthropic's documented events as Bedrock does, and boto3 reads the mock's "
    "(tests/integration/test_bedrock_invoke.py)",
}


def test_fixture_layout() -> None:
    assert sorted(p.name for p in HERE.iterdir()) == sorted(DIALECT_NAMES)
    for dialect in DIALECT_NAMES:
        goldens = [json.loads(p.read_text("utf-8")) for p in (HERE / dialect).glob("*.json")]
        documented = [g for g in goldens if g.get("source", "").startswith("https://")]
        assert documented or dialect in UNDOCUMENTED, (
            f"{dialect}: no body copied from the provider's documentation"
        )
        statuses = {g["status"] for g in goldens}
        assert {"completed", "failed", "interrupted"} <= statuses, dialect
        assert {"truncated", "filtered"} <= statuses or dialect == "ollama", dialect
        reasons = {g["finish_reason"] for g in goldens}
        assert {"stop", "tool_calls", "error", None} <= reasons, dialect


@pytest.mark.parametrize("golden", GOLDENS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fixture(golden: Path) -> None:
    dialect, body, expected = golden.parent.name, body_of(golden), expected_of(golden)
    for how, chunks in chunkings(body):
        assert fold(dialect, chunks) == expected, how


# Where parse() and the goldens (design.md) disagree. strict xfail: a fix must remove them.
KNOWN_PARSE_GAPS: dict[str, str] = {}


def parse_cases() -> list[Any]:
    cases = []
    for golden in GOLDENS:
        name = f"{golden.parent.name}/{golden.stem}"
        gap = KNOWN_PARSE_GAPS.get(name)
        marks = [pytest.mark.xfail(reason=gap, strict=True)] if gap else []
        cases.append(pytest.param(golden, id=name, marks=marks))
    return cases


@pytest.mark.parametrize("golden", parse_cases())
def test_fixture_through_parse(golden: Path) -> None:
    unbroken = pytest.importorskip("unbroken")
    parse = getattr(unbroken, "parse", None)
    if parse is None:
        pytest.skip("unbroken.parse is not there yet")
    dialect, body, expected = golden.parent.name, body_of(golden), expected_of(golden)
    for how, chunks in chunkings(body):
        message = parse(chunks, dialect=dialect, trace=False)
        usage = message.usage
        outcome = {
            "status": message.status.value,
            "finish_reason": None if message.finish_reason is None else message.finish_reason.value,
            "raw_finish_reason": message.raw_finish_reason,
            "text": message.text,
            "reasoning": message.reasoning,
            "tool_calls": [
                {"id": call.id, "name": call.name, "arguments": call.arguments}
                for call in message.tool_calls
            ],
            "usage": None if usage is None else {f: getattr(usage, f) for f in USAGE_FIELDS},
        }
        assert outcome == expected, how
