"""AWS event-stream framing: unbroken's EventStreamDecoder beside botocore's EventStreamBuffer.

Both are incremental: ``EventStreamDecoder.receive_data(read)``, and botocore's own loop
(``buffer.add_data(read)`` then iterating the buffer for the complete messages), as its
``EventStream`` feeds it from the response body. Both check the prelude and message CRC32 and
parse the headers; botocore also builds its message objects, we our ``EventStreamMessage``.

Body: Bedrock ConverseStream messages (``contentBlockDelta`` events with a text delta of 20-120
characters, CJK and emoji among them, padded with ``p`` as Bedrock pads them), 150-330 bytes
each. Reads: 1024 bytes, and random 1..4096 (seeded). Each figure is the best of ``--repeat``
runs, peers interleaved, in process CPU seconds (``time.process_time``: on a shared machine other
processes inflate wall time, not this). An untimed pass first checks that both peers find the
same messages (headers and payloads).

Run: ``.venv/bin/python benchmarks/framing_eventstream.py`` (``--quick`` for a 4 MB body).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import time
from collections.abc import Callable

import botocore.eventstream

from unbroken.framing import EventStreamDecoder, encode_message

Runner = Callable[[list[bytes]], int]
TEXT = "The quick brown fox 跳过了懒狗 🦊 and then \"quoted\" words, tabs\tand more. "


def converse_body(target: int, seed: int = 7) -> bytes:
    rng = random.Random(seed)
    out: list[bytes] = []
    size = 0
    while size < target:
        start = rng.randrange(len(TEXT))
        text = (TEXT * 3)[start : start + rng.randint(20, 120)]
        payload = {"contentBlockIndex": 0, "delta": {"text": text},
                   "p": "abcdefghijklmnopqrstuvwxyz"[: rng.randint(1, 26)]}
        message = encode_message(
            {":event-type": "contentBlockDelta", ":content-type": "application/json",
             ":message-type": "event"},
            json.dumps(payload, ensure_ascii=False).encode(),
        )
        out.append(message)
        size += len(message)
    return b"".join(out)


def fixed_reads(body: bytes, size: int) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)]


def random_reads(body: bytes, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    reads, i = [], 0
    while i < len(body):
        n = rng.randint(1, 4096)
        reads.append(body[i : i + n])
        i += n
    return reads


def run_unbroken(reads: list[bytes]) -> int:
    decoder = EventStreamDecoder()
    receive = decoder.receive_data
    count = 0
    for read in reads:
        messages = receive(read)
        if messages:
            count += len(messages)
    return count + len(decoder.receive_eof())


def run_botocore(reads: list[bytes]) -> int:
    buffer = botocore.eventstream.EventStreamBuffer()
    count = 0
    for read in reads:
        buffer.add_data(read)
        for _ in buffer:
            count += 1
    return count


def same_messages(body: bytes) -> int:
    ours = EventStreamDecoder().receive_data(body)
    theirs = botocore.eventstream.EventStreamBuffer()
    theirs.add_data(body)
    expected = [(m.headers, m.payload) for m in theirs]
    assert [(m.headers, m.payload) for m in ours] == expected, "the peers disagree"
    return len(expected)


def best(runner: Runner, reads: list[bytes], repeat: int, expected: int) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        count = runner(reads)
        times.append(time.process_time() - start)
        assert count == expected, (runner.__name__, count, expected)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 4 MB body instead of 32 MB")
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs (default 3)")
    args = parser.parse_args()
    body = converse_body(4_000_000 if args.quick else 32_000_000)
    messages = same_messages(body)
    print(f"body: {len(body) / 1e6:.1f} MB, {messages} messages "
          f"({len(body) / messages:.0f} bytes each)")
    print(f"{'reads':<16}{'peer':<10}{'MB/s':>9}{'messages/s':>14}{'ratio':>8}")
    for label, reads in (("1024 bytes", fixed_reads(body, 1024)),
                         ("random 1..4096", random_reads(body))):
        timings: dict[str, list[float]] = {"unbroken": [], "botocore": []}
        for _ in range(args.repeat):  # interleaved, so that load on the machine hits both
            timings["unbroken"].append(best(run_unbroken, reads, 1, messages))
            timings["botocore"].append(best(run_botocore, reads, 1, messages))
        ours, theirs = min(timings["unbroken"]), min(timings["botocore"])
        for peer, seconds in (("unbroken", ours), ("botocore", theirs)):
            print(f"{label:<16}{peer:<10}{len(body) / seconds / 1e6:>9.1f}"
                  f"{messages / seconds:>14,.0f}{theirs / seconds:>7.2f}x")


if __name__ == "__main__":
    main()
