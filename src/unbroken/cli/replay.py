"""``unbroken replay cap.jsonl --split whole|bytes|random|utf8``: same bytes, other reads.

A correct receiver gives the same message however the network cut the body; this command proves
it for a real capture, and exits 1 if anything differs.
"""

from __future__ import annotations

import argparse
import json
import random
from bisect import bisect_left
from dataclasses import replace
from itertools import accumulate
from typing import Any

from ..client.capture import Capture, CaptureConnection, redact_url, replay_capture
from ..message import Message
from .errors import EXIT_CHECK_FAILED, EXIT_OK
from .inspect import add_source_arguments, load_capture, request_headers
from .output import console

__all__ = ["SPLITS", "add_parser", "message_summary", "resplit"]

SPLITS = ("whole", "bytes", "random", "utf8")


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "replay", help="re-run a capture under other read boundaries; the result must not change"
    )
    add_source_arguments(parser)
    parser.add_argument("--split", choices=SPLITS, default="random",
                        help="how to cut the reads (default random)")
    parser.add_argument("--seed", type=int, default=0, help="seed for --split random")
    parser.add_argument("--dialect", help="override the capture's dialect")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=run)


def resplit(capture: Capture, how: str, seed: int = 0) -> Capture:
    """The capture with each connection's bytes cut another way. Each piece keeps the time of
    the original read that held its last byte, so frame times (and stall warnings) stay."""
    rng = random.Random(seed)
    connections = []
    for conn in capture.connections:
        body = b"".join(data for _, data in conn.reads)
        ends = list(accumulate(len(data) for _, data in conn.reads))
        cuts = _cuts(body, how, rng)
        reads = [(conn.reads[bisect_left(ends, b)][0], body[a:b])
                 for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True) if b > a]
        connections.append(
            CaptureConnection(number=conn.number, kind=conn.kind, status=conn.status,
                              headers=conn.headers, reads=reads)
        )
    return replace(capture, connections=connections)


def _cuts(body: bytes, how: str, rng: random.Random) -> list[int]:
    if how == "whole":
        return []
    if how == "bytes":
        return list(range(1, len(body)))
    if how == "utf8":
        # Cut right after every lead byte of a multi-byte character: each one arrives in halves.
        return [i + 1 for i, byte in enumerate(body) if byte >= 0xC0 and i + 1 < len(body)]
    cuts: list[int] = []
    pos = 0
    while True:
        pos += rng.randint(1, 64)
        if pos >= len(body):
            return cuts
        cuts.append(pos)


def message_summary(message: Message) -> dict[str, Any]:
    """What must not change under another chunking. Stall warnings are left out: they say when
    bytes arrived, and a re-cut that joins reads delivers earlier bytes with later ones."""
    return {
        "status": message.status.value,
        "finish_reason": message.finish_reason.value if message.finish_reason else None,
        "raw_finish_reason": message.raw_finish_reason,
        "text": message.text,
        "reasoning": message.reasoning,
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
        ],
        "last_seq": message.last_seq,
        "duplicates": message.duplicates,
        "error": None if message.error is None else type(message.error).__name__,
        "warnings": sorted({w.code for w in message.trace.warnings} - {"stall"}),
    }


def run(arguments: argparse.Namespace) -> int:
    capture = load_capture(arguments.capture, request_headers(arguments))
    original = message_summary(replay_capture(capture, dialect=arguments.dialect))
    split = resplit(capture, arguments.split, arguments.seed)
    again = message_summary(replay_capture(split, dialect=arguments.dialect))
    reads = sum(len(c.reads) for c in split.connections)
    differs = sorted(k for k in original if original[k] != again[k])
    if arguments.json:
        print(json.dumps({"split": arguments.split, "reads": reads, "identical": not differs,
                          "differs": differs, "original": original, "replayed": again},
                         ensure_ascii=False))
    else:
        out = console()
        out.print(f"replayed [bold]{redact_url(arguments.capture)}[/] in {reads} reads "
                  f"({arguments.split})")
        out.print(f"status {again['status']}, finish reason {again['finish_reason']} "
                  f"(raw {again['raw_finish_reason']!r}), {len(again['text'])} characters")
        if differs:
            out.print(f"[bold red]DIFFERENT[/] from the original reads: {', '.join(differs)}")
        else:
            out.print("[bold green]identical[/] to the original reads")
    return EXIT_CHECK_FAILED if differs else EXIT_OK
