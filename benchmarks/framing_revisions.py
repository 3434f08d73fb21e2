"""SSEDecoder against itself at earlier git revisions, in one process: has a change cost speed?

Each ``--rev`` names a commit; its ``src/unbroken/framing/*sse*.py`` files are loaded from git
into a temporary package (their ``..`` imports pointed at the installed ``unbroken``) beside the
working tree's decoder. All decoders get the same reads of the bodies of ``framing.py`` (chat, its
CRLF variant, Anthropic LF and CRLF, Responses, the proxied chat and Anthropic bodies with an
``id:`` line per block, and a 1 MiB line) at 1024-byte, random 1..4096 and 1-byte reads (the
1-byte rows on 100 KB). An untimed pass checks that every decoder returns the same events. Timed
runs alternate the decoders, ``gc`` off, process CPU time, and each figure is the best of
``--repeat``: on a shared machine single runs swing, the ratio of two bests in one process much
less. Printed: µs per event and, for each revision, working tree time / revision time.

Run: ``.venv/bin/python benchmarks/framing_revisions.py --rev 3afc02e`` (from the repository).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from unbroken import SSEDecoder

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script, from anywhere
from benchmarks.framing import (
    anthropic_body,
    chat_body,
    fixed_reads,
    line_body,
    proxied,
    random_reads,
    responses_body,
)

ROOT = Path(__file__).resolve().parent.parent
FRAMING = "src/unbroken/framing"


def decoder_at(rev: str, into: Path) -> type[Any]:
    """The ``SSEDecoder`` class of commit ``rev``, loaded from git into a package under ``into``."""
    listing = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{rev}:{FRAMING}"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    package = "sse_" + re.sub(r"\W", "_", rev)
    folder = into / package
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    home = ""
    for name in listing:
        if "sse" not in name or not name.endswith(".py"):
            continue
        source = subprocess.run(
            ["git", "show", f"{rev}:{FRAMING}/{name}"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        (folder / name).write_text(source.replace("from ..", "from unbroken."))
        if "class SSEDecoder" in source:
            home = name[:-3]
    sys.path.insert(0, str(into))
    return importlib.import_module(f"{package}.{home}").SSEDecoder  # type: ignore[no-any-return]


def run(decoder_type: type[Any], reads: list[bytes]) -> list[Any]:
    decoder = decoder_type()
    events: list[Any] = []
    for read in reads:
        events += decoder.receive_data(read)
    return [tuple(event)[:6] for event in events + decoder.receive_eof()]


def count(decoder_type: type[Any], reads: list[bytes]) -> int:
    decoder = decoder_type()
    receive = decoder.receive_data
    n = 0
    for read in reads:
        events = receive(read)
        if events:
            n += len(events)
    return n + len(decoder.receive_eof())


def best(decoders: list[type[Any]], reads: list[bytes], repeat: int) -> list[float]:
    times = [float("inf")] * len(decoders)
    gc.disable()
    try:
        for i in range(repeat):
            order = list(range(len(decoders)))
            if i % 2:
                order.reverse()
            for k in order:
                start = time.process_time()
                count(decoders[k], reads)
                times[k] = min(times[k], time.process_time() - start)
    finally:
        gc.enable()
    return times


def rows(size: int) -> list[tuple[str, bytes, list[tuple[str, Callable[[bytes], list[bytes]]]]]]:
    reads: list[tuple[str, Callable[[bytes], list[bytes]]]] = [
        ("1024", lambda body: fixed_reads(body, 1024)),
        ("random", random_reads),
    ]
    one = [("1 byte", lambda body: fixed_reads(body[: 100_000], 1))]
    return [
        ("chat", chat_body(size)[0], reads + one),
        ("chat-crlf", chat_body(size, crlf=True)[0], reads + one),
        ("anthropic", anthropic_body(size)[0], reads),
        ("anthropic-crlf", anthropic_body(size, crlf=True)[0], reads),
        ("responses", responses_body(size)[0], reads),
        ("proxy-chat", proxied(chat_body(size))[0], reads),
        ("proxy-anthropic", proxied(anthropic_body(size))[0], reads),
        ("1 MiB line", line_body(2**20)[0], reads),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", action="append", required=True, help="a commit (repeatable)")
    parser.add_argument("--repeat", type=int, default=20, help="best of N runs (default 20)")
    parser.add_argument("--size", type=int, default=1_000_000, help="body bytes (default 1 MB)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        decoders = [SSEDecoder] + [decoder_at(rev, Path(tmp)) for rev in args.rev]
        names = ["tree", *args.rev]
        head = " | ".join(f"{name} µs/event" for name in names)
        ratios = " | ".join(f"tree / {rev}" for rev in args.rev)
        print(f"| body | reads | {head} | {ratios} |")
        print("|---" * (2 + len(names) + len(args.rev)) + "|")
        for body_name, body, kinds in rows(args.size):
            for read_name, cut in kinds:
                reads = cut(body)
                outcomes = [run(decoder, reads) for decoder in decoders]
                assert all(outcome == outcomes[0] for outcome in outcomes), body_name
                times = best(decoders, reads, args.repeat)
                events = len(outcomes[0])
                per_event = " | ".join(f"{t / events * 1e6:.2f}" for t in times)
                vs = " | ".join(f"{times[0] / t:.2f}" for t in times[1:])
                print(f"| {body_name} | {read_name} | {per_event} | {vs} |", flush=True)


if __name__ == "__main__":
    main()
