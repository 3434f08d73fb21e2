"""SSE framing: unbroken's SSEDecoder beside the SSE decoders of four SDKs/libraries and a floor.

Peers, each fed exactly the way its library feeds itself:

- openai       ``openai._streaming.SSEDecoder().iter_bytes(chunks)``
- anthropic    ``anthropic._streaming.SSEDecoder().iter_bytes(chunks)``
- httpx-sse    what ``EventSource.iter_sse`` does: an incremental UTF-8 decoder with
               ``errors="replace"`` (httpx's ``iter_text``), ``SSELineDecoder.decode``, then
               ``SSEDecoder.decode(line.rstrip("\\n"))``
- sseclient    ``sseclient.SSEClient(chunks).events()`` (sseclient-py)
- floor        the least honest work: split the whole body on ``\\n\\n``, each block on ``\\n``
               (``\\r\\n`` for the CRLF body), strip ``data: ``; no decoding, no objects, no
               reads (one pass, linear)

Bodies: an OpenAI-chat-style stream (CJK, emoji, JSON escapes), its CRLF variant, one 8 MiB
``data:`` line, and streams whose every block is ``event:`` + ``data:``: Anthropic Messages
(``content_block_delta`` events of 150-250 bytes; LF and CRLF) and OpenAI Responses
(``response.output_text.delta``); and the chat and Anthropic streams as an unbroken proxy relays
them, an ``id: STREAM:SEQ`` line in every block (after the event name, as ``proxy/wire.py``
writes it). On those a sixth peer, ``general``, is unbroken with its hot
paths switched off: what a hot path for the shape buys. Reads: 1024 bytes, random 1..4096 (seeded),
and 1 byte (on a smaller body of the same kind, 2 MB; not on the 8 MiB line).

Each figure is the best of ``--repeat`` runs, peers interleaved, timed in process CPU seconds
(``time.process_time``: other processes on a shared machine inflate wall time, not this). Timed
runs only count events; an untimed pass first checks that every peer decodes the same number of
events and the same total data length as unbroken. On the 8 MiB line, where some peers are
quadratic, a run that passes ``--budget`` CPU seconds is stopped and reported as a bound (marked
``>``/``<``). Peak memory is measured in a separate, untimed pass with tracemalloc (1024-byte
reads), events discarded as they come.

Run: ``.venv/bin/python benchmarks/framing.py`` (``--quick`` for smaller bodies).
"""

from __future__ import annotations

import argparse
import codecs
import gc
import json
import random
import time
import tracemalloc
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import anthropic._streaming
import httpx_sse._decoders
import openai._streaming
import sseclient

from unbroken import SSEDecoder

# A peer decodes the reads and returns (events, total data length); with ``checksum=False``
# (the timed runs) it only counts, so that no peer is charged for the checking.
Runner = Callable[[Iterable[bytes], bool], tuple[int, int]]


class OverBudget(Exception):
    def __init__(self, fed: int) -> None:
        super().__init__(fed)
        self.fed = fed


# -- bodies -------------------------------------------------------------------------------------

_WORDS = [
    "Hello", " world", "你好", "、世界", "😀", "🚀", " the", " quick", "\n", '"quoted"', "\t",
    "é", " naïve", "日本語の", "🎉🎉", " back\\slash", " 42", ",", "한국어", " café", "\u2028",
]  # fmt: skip


def chat_body(target: int, *, crlf: bool = False, seed: int = 7) -> tuple[bytes, int]:
    """An OpenAI chat-completions stream of about ``target`` bytes, ending in ``[DONE]``."""
    rng = random.Random(seed)
    eol = b"\r\n" if crlf else b"\n"
    parts: list[bytes] = []
    size = 0
    while size < target:
        content = "".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 4)))
        chunk = {
            "id": "chatcmpl-9xYzAbC123",
            "object": "chat.completion.chunk",
            "created": 1718000000,
            "model": "gpt-4o-2024-08-06",
            "system_fingerprint": "fp_0123456789",
            "choices": [
                {"index": 0, "delta": {"content": content}, "logprobs": None, "finish_reason": None}
            ],
        }
        line = b"data: " + json.dumps(chunk, ensure_ascii=False, separators=(",", ":")).encode()
        parts.append(line + eol + eol)
        size += len(parts[-1])
    parts.append(b"data: [DONE]" + eol + eol)
    return b"".join(parts), len(parts)


def _event_block(name: str, value: dict[str, Any], eol: bytes) -> bytes:
    data = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    return b"event: " + name.encode() + eol + b"data: " + data + eol + eol


def anthropic_body(target: int, *, crlf: bool = False, seed: int = 7) -> tuple[bytes, int]:
    """An Anthropic Messages stream of about ``target`` bytes: every block ``event:`` + ``data:``.

    Mostly ``content_block_delta`` events of 150-250 bytes, with the documented start and end
    events and a ``ping`` every 50 deltas.
    """
    rng = random.Random(seed)
    eol = b"\r\n" if crlf else b"\n"
    message: dict[str, Any] = {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-sonnet-4-20250514",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 25, "output_tokens": 1},
    }
    parts = [
        _event_block("message_start", {"type": "message_start", "message": message}, eol),
        _event_block(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
            eol,
        ),
    ]
    size = sum(map(len, parts))
    while size < target:
        text = "".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 24)))
        delta = {"type": "text_delta", "text": text}
        value = {"type": "content_block_delta", "index": 0, "delta": delta}
        parts.append(_event_block("content_block_delta", value, eol))
        size += len(parts[-1])
        if len(parts) % 50 == 0:
            parts.append(_event_block("ping", {"type": "ping"}, eol))
    parts += [
        _event_block("content_block_stop", {"type": "content_block_stop", "index": 0}, eol),
        _event_block(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 15},
            },
            eol,
        ),
        _event_block("message_stop", {"type": "message_stop"}, eol),
    ]
    return b"".join(parts), len(parts)


def responses_body(target: int, *, seed: int = 7) -> tuple[bytes, int]:
    """An OpenAI Responses stream of about ``target`` bytes (``response.output_text.delta``)."""
    rng = random.Random(seed)
    eol = b"\n"
    item = "msg_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654"
    response: dict[str, Any] = {
        "id": "resp_67c9fdcecf488190bdd9a0409de3a1ec",
        "object": "response",
        "status": "in_progress",
        "model": "gpt-4.1-2025-04-14",
        "output": [],
    }
    parts = [
        _event_block(kind, {"type": kind, "response": response, "sequence_number": seq}, eol)
        for seq, kind in enumerate(["response.created", "response.in_progress"])
    ]
    size = sum(map(len, parts))
    while size < target:
        value = {
            "type": "response.output_text.delta",
            "sequence_number": len(parts),
            "item_id": item,
            "output_index": 0,
            "content_index": 0,
            "delta": "".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 4))),
            "logprobs": [],
        }
        parts.append(_event_block("response.output_text.delta", value, eol))
        size += len(parts[-1])
    done = {
        "type": "response.completed",
        "response": response | {"status": "completed"},
        "sequence_number": len(parts),
    }
    parts.append(_event_block("response.completed", done, eol))
    return b"".join(parts), len(parts)


def proxied(body: tuple[bytes, int]) -> tuple[bytes, int]:
    """An LF body as an unbroken proxy relays it: each block with an ``id: STREAM:SEQ`` line,
    after its event name if it has one (the order of ``proxy/wire.py``)."""
    blocks = body[0].split(b"\n\n")[:-1]
    out = []
    for seq, block in enumerate(blocks):
        first, _, rest = block.partition(b"\n")
        if first.startswith(b"event: "):
            out.append(b"%s\nid: ub_x:%d\n%s\n\n" % (first, seq, rest))
        else:
            out.append(b"id: ub_x:%d\n%s\n\n" % (seq, block))
    return b"".join(out), body[1]


def line_body(size: int) -> tuple[bytes, int]:
    """One ``data:`` line of ``size`` bytes in all (a huge tool-call argument, say)."""
    unit = '{"k":"値😀\\n"},'.encode()
    payload = (unit * (size // len(unit) + 1))[: size - 8]
    payload = payload.decode("utf-8", "ignore").encode()  # do not end inside a character
    return b"data: " + payload + b"\n\n", 1


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


# -- peers --------------------------------------------------------------------------------------


def run_unbroken(
    chunks: Iterable[bytes], checksum: bool, decoder_type: type[SSEDecoder] = SSEDecoder
) -> tuple[int, int]:
    decoder = decoder_type()
    receive = decoder.receive_data
    count = chars = 0
    if not checksum:
        for chunk in chunks:
            events = receive(chunk)
            if events:
                count += len(events)
        return count + len(decoder.receive_eof()), 0
    for chunk in chunks:
        for event in receive(chunk):
            count += 1
            chars += len(event.data)
    for event in decoder.receive_eof():
        count += 1
        chars += len(event.data)
    return count, chars


def drain(events: Iterable[Any], checksum: bool) -> tuple[int, int]:
    count = chars = 0
    if not checksum:
        for _ in events:
            count += 1
        return count, 0
    for event in events:
        count += 1
        chars += len(event.data)
    return count, chars


def run_openai(chunks: Iterable[bytes], checksum: bool) -> tuple[int, int]:
    return drain(openai._streaming.SSEDecoder().iter_bytes(iter(chunks)), checksum)


def run_anthropic(chunks: Iterable[bytes], checksum: bool) -> tuple[int, int]:
    return drain(anthropic._streaming.SSEDecoder().iter_bytes(iter(chunks)), checksum)


def httpx_sse_events(chunks: Iterable[bytes]) -> Iterator[Any]:
    # httpx's Response.iter_text: an incremental decoder with errors="replace"; then the body of
    # httpx_sse's _iter_sse_lines and EventSource.iter_sse.
    text_decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    lines = httpx_sse._decoders.SSELineDecoder()
    decoder = httpx_sse._decoders.SSEDecoder()
    for chunk in chunks:
        text = text_decoder.decode(chunk)
        if text:
            for line in lines.decode(text):
                event = decoder.decode(line.rstrip("\n"))
                if event is not None:
                    yield event
    tail = text_decoder.decode(b"", True)
    for line in [*lines.decode(tail), *lines.flush()] if tail else lines.flush():
        event = decoder.decode(line.rstrip("\n"))
        if event is not None:
            yield event


def run_httpx_sse(chunks: Iterable[bytes], checksum: bool) -> tuple[int, int]:
    return drain(httpx_sse_events(chunks), checksum)


def run_sseclient(chunks: Iterable[bytes], checksum: bool) -> tuple[int, int]:
    return drain(sseclient.SSEClient(iter(chunks)).events(), checksum)


class GeneralSSEDecoder(SSEDecoder):
    """unbroken without its accelerator: every block is read by the field reader."""

    accelerator = None


def run_general_path(chunks: Iterable[bytes], checksum: bool) -> tuple[int, int]:
    return run_unbroken(chunks, checksum, GeneralSSEDecoder)


PEERS: dict[str, Runner] = {
    "unbroken": run_unbroken,
    "openai": run_openai,
    "anthropic": run_anthropic,
    "httpx-sse": run_httpx_sse,
    "sseclient": run_sseclient,
}


def floor(body: bytes) -> int:
    # Split on the body's own line ending (a CRLF body has no LF LF to split on).
    eol = b"\r\n" if b"\r\n" in body[:4096] else b"\n"
    count = 0
    for block in body.split(eol + eol):
        for line in block.split(eol):
            if line.startswith(b"data: "):
                line[6:]
                count += 1
    return count


# -- measurement --------------------------------------------------------------------------------


def metered(chunks: list[bytes], deadline: float) -> Iterator[bytes]:
    """The reads, stopping with ``OverBudget`` once ``deadline`` (CPU seconds) passes."""
    fed = 0
    for i, chunk in enumerate(chunks):
        if not i & 63 and time.process_time() > deadline:
            raise OverBudget(fed)
        fed += len(chunk)
        yield chunk


@dataclass(frozen=True, slots=True, kw_only=True)
class Timing:
    seconds: float
    events: int
    complete: bool  # False: stopped at the budget; seconds is a lower bound
    fed: int


def timed(runner: Runner, chunks: list[bytes], budget: float | None) -> Timing:
    """CPU seconds of one run; ``budget`` (for bodies where a peer may be quadratic) caps it."""
    gc.collect()
    start = time.process_time()
    try:
        reads = chunks if budget is None else metered(chunks, start + budget)
        events, _ = runner(reads, False)
    except OverBudget as over:
        return Timing(seconds=time.process_time() - start, events=0, complete=False, fed=over.fed)
    seconds = time.process_time() - start
    return Timing(seconds=seconds, events=events, complete=True, fed=sum(map(len, chunks)))


def peak_memory(runner: Runner, chunks: list[bytes], budget: float | None) -> tuple[int, bool]:
    gc.collect()
    tracemalloc.start()
    start = time.process_time()
    complete = True
    try:
        runner(chunks if budget is None else metered(chunks, start + budget), False)
    except OverBudget:
        complete = False
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, complete


def mb(n: float) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def bench(
    name: str,
    body: bytes,
    events: int,
    patterns: dict[str, list[bytes]],
    args: argparse.Namespace,
    *,
    budget: float | None = None,
    general: bool = False,
) -> dict[str, dict[str, Timing]]:
    peers = PEERS | {"general": run_general_path} if general else PEERS
    print(f"\n## {name}: {len(body) / 1e6:.1f} MB, {events} events")
    floor_best = min(_floor_seconds(body, events) for _ in range(args.repeat))
    print(f"floor (whole body, no reads): {len(body) / floor_best / 1e6:8.1f} MB/s")
    results: dict[str, dict[str, Timing]] = {}
    for pattern, chunks in patterns.items():
        size = sum(map(len, chunks))
        # Untimed: every peer decodes the same events (count and total data length).
        expected = run_unbroken(chunks, True)
        assert expected[0] == events, (name, pattern, expected)
        for peer, runner in peers.items():
            if budget is None or peer == "unbroken":
                assert runner(chunks, True) == expected, (name, pattern, peer)
        best: dict[str, Timing] = {}
        for _ in range(args.repeat):
            for peer, runner in peers.items():
                if peer in best and not best[peer].complete:
                    continue  # it already ran out of budget: once is enough
                run = timed(runner, chunks, budget)
                if peer not in best or (run.complete and run.seconds < best[peer].seconds):
                    best[peer] = run
        results[pattern] = best
        ours = best["unbroken"]
        assert ours.complete and ours.events == events, (pattern, ours)
        print(f"\n{name}, {pattern} reads ({len(chunks)} reads of {size / 1e6:.1f} MB):")
        print(f"  {'decoder':<10} {'MB/s':>10} {'events/s':>12}  unbroken's speed-up")
        for peer, run in best.items():
            if run.complete:
                assert run.events == events, (peer, pattern, run)
                rate = f"{size / run.seconds / 1e6:10.1f}"
                per_s = f"{run.events / run.seconds:12,.0f}"
                speed_up = f"{run.seconds / ours.seconds:.2f}x"
            else:  # stopped at the budget: the full run takes at least this long
                rate = f"<{size / run.seconds / 1e6:9.1f}"
                per_s = f"{'-':>12}"
                speed_up = (
                    f">{run.seconds / ours.seconds:.0f}x (stopped after {run.seconds:.0f} s, "
                    f"{run.fed / size:.0%} of the body)"
                )
            label = "-" if peer == "unbroken" else speed_up
            print(f"  {peer:<10} {rate} {per_s}  {label}")
        print(f"  unbroken / floor: {ours.seconds / floor_best:.2f}x the floor's time")
        results[pattern]["floor"] = Timing(
            seconds=floor_best, events=events, complete=True, fed=len(body)
        )
    if "1024" in patterns and not args.no_memory:
        print(f"\n{name}, peak memory (tracemalloc, 1024-byte reads, events discarded):")
        for peer, runner in peers.items():
            peak, complete = peak_memory(runner, patterns["1024"], budget)
            print(f"  {peer:<10} {'>' if not complete else ' '}{mb(peak):>10}")
    return results


def _floor_seconds(body: bytes, events: int) -> float:
    gc.collect()
    start = time.process_time()
    count = floor(body)
    seconds = time.process_time() - start
    assert count == events, (count, events)
    return seconds


def report_targets(results: dict[str, dict[str, dict[str, Timing]]]) -> None:
    print("\n## Targets (issue 2)")

    def check(label: str, ok: bool, detail: str) -> None:
        print(f"  [{'met' if ok else 'MISSED'}] {label}: {detail}")

    for body in ("chat", "chat-crlf"):
        for pattern in ("1024", "random"):
            best = results[body][pattern]
            ours = best["unbroken"].seconds
            peers = {p: t for p, t in best.items() if p not in ("unbroken", "floor")}
            fastest = min(peers, key=lambda p: peers[p].seconds)
            ratio = peers[fastest].seconds / ours
            check(
                f"{body} {pattern}: >= 1.3x the fastest peer",
                ratio >= 1.3,
                f"{ratio:.2f}x {fastest}",
            )
            to_floor = ours / best["floor"].seconds
            within = to_floor <= 1.5
            check(f"{body} {pattern}: within 1.5x of the floor", within, f"{to_floor:.2f}x")
        best = results[body]["1"]
        slowest_margin = min(
            t.seconds / best["unbroken"].seconds
            for p, t in best.items()
            if p not in ("unbroken", "floor")
        )
        faster = slowest_margin > 1
        check(f"{body} 1-byte: faster than every peer", faster, f"{slowest_margin:.2f}x")
    for pattern in ("1024", "random"):
        best = results["line"][pattern]
        to_floor = best["unbroken"].seconds / best["floor"].seconds
        check(f"one-line body {pattern}: within 3x of the floor", to_floor <= 3, f"{to_floor:.2f}x")


def report_general_path(results: dict[str, dict[str, dict[str, Timing]]]) -> None:
    # A hot path for a block shape is worth its code at >= 1.5x the general path.
    print("\n## event: + data: and proxied bodies, unbroken against its general path (bar: 1.5x)")
    for body in ("anthropic", "anthropic-crlf", "responses", "proxy-chat", "proxy-anthropic"):
        for pattern in ("1024", "random"):
            best = results[body][pattern]
            ratio = best["general"].seconds / best["unbroken"].seconds
            print(f"  {body} {pattern}: {ratio:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 MB body, 1 MiB line, 200 KB")
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs (default 3)")
    parser.add_argument(
        "--budget", type=float, default=30.0, help="CPU seconds per run on the line (default 30)"
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the tracemalloc pass")
    args = parser.parse_args()
    chat_size, line_size, byte_size = (
        (5_000_000, 2**20, 200_000) if args.quick else (50_000_000, 8 * 2**20, 2_000_000)
    )
    print(f"# SSE framing benchmark{' (--quick)' if args.quick else ''}")
    print(f"1-byte reads use a {byte_size / 1e6:g} MB body of the same kind; none on the line.")
    results: dict[str, dict[str, dict[str, Timing]]] = {}
    for name, crlf in (("chat", False), ("chat-crlf", True)):
        body, events = chat_body(chat_size, crlf=crlf)
        small, small_events = chat_body(byte_size, crlf=crlf)
        patterns = {"1024": fixed_reads(body, 1024), "random": random_reads(body)}
        results[name] = bench(name, body, events, patterns, args)
        results[name] |= bench(
            f"{name} (small)", small, small_events, {"1": fixed_reads(small, 1)}, args
        )
    # Every block "event:" + "data:" (Anthropic Messages, OpenAI Responses), and bodies as a
    # proxy relays them (an "id:" line in every block); "general" is unbroken with its hot
    # paths off.
    for name, make in (
        ("anthropic", anthropic_body),
        ("anthropic-crlf", lambda size: anthropic_body(size, crlf=True)),
        ("responses", responses_body),
        ("proxy-chat", lambda size: proxied(chat_body(size))),
        ("proxy-anthropic", lambda size: proxied(anthropic_body(size))),
    ):
        body, events = make(chat_size)
        patterns = {"1024": fixed_reads(body, 1024), "random": random_reads(body)}
        results[name] = bench(name, body, events, patterns, args, general=True)
    body, events = line_body(line_size)
    patterns = {"1024": fixed_reads(body, 1024), "random": random_reads(body)}
    name = f"line-{line_size >> 20}mib"
    results["line"] = bench(name, body, events, patterns, args, budget=args.budget)
    report_targets(results)
    report_general_path(results)


if __name__ == "__main__":
    main()
