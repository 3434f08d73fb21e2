"""Body bytes to final text and finish reason, peers side by side in one process.

Peers, each fed the same generated body in 1024-byte reads:

- unbroken: ``StreamReceiver`` (what ``parse`` runs), trace off and on; also with the standard
  ``json`` module instead of orjson (run in a subprocess that cannot import orjson);
- the openai SDK: ``chat.completions.create(stream=True)`` and ``responses.create(stream=True)``;
- the anthropic SDK: the raw ``messages.create(stream=True)`` event loop and the
  ``messages.stream`` ``text_stream`` loop;
- httpx-sse + ``json.loads`` (over httpx's own mock transport);
- a floor: split the body on ``b"\\n\\n"``, ``json.loads`` each payload, join the deltas.

The SDKs get their bytes from an in-process ``httpx2.MockTransport``: no network. Reported:
microseconds per event (frame), time to first delta, ratios to the floor, and the per-event cost
at two body sizes (flat means linear). Every peer's text and finish reason are checked.

    python benchmarks/end_to_end.py [--deltas 20000] [--small 2000] [--repeat 3]

``--otel`` measures instead what OpenTelemetry costs ``unbroken.stream`` (over the same mock
transport): CPU seconds per frame with ``unbroken.telemetry`` off and on (the SDK's tracer with
a batch processor and a discarding exporter, its meter with an in-memory reader), runs
interleaved, and the ratio.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

READ_SIZE = 1024
WORDS = ["The ", "quick ", "brown ", "fox ", "跳过", "了 ", "lazy ", "dog", "\n", "😀 "]


def words(n: int) -> list[str]:
    return [WORDS[i % len(WORDS)] + ("" if i % 7 else str(i)) for i in range(n)]


def sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return (head + "data: " + json.dumps(data, ensure_ascii=False) + "\n\n").encode()


def chat_body(parts: list[str]) -> bytes:
    def chunk(delta: dict[str, Any], finish: str | None) -> bytes:
        return sse(
            {
                "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
                "object": "chat.completion.chunk",
                "created": 1741569952,
                "model": "gpt-4.1-2025-04-14",
                "service_tier": "default",
                "system_fingerprint": "fp_c7ca0ebaca",
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }
        )

    out = [chunk({"role": "assistant", "content": "", "refusal": None}, None)]
    out += [chunk({"content": part}, None) for part in parts]
    out.append(chunk({}, "stop"))
    return b"".join(out) + b"data: [DONE]\n\n"


def responses_body(parts: list[str]) -> bytes:
    response = {
        "id": "resp_67c9fdcecf488190bdd9a0409de3a1ec",
        "object": "response",
        "model": "gpt-4.1-2025-04-14",
        "status": "in_progress",
        "output": [],
    }
    events: list[dict[str, Any]] = [{"type": "response.created", "response": response}]
    events += [
        {
            "type": "response.output_text.delta",
            "item_id": "msg_67c9fdcf37fc8190ba82116e33fb28c5",
            "output_index": 0,
            "content_index": 0,
            "delta": part,
        }
        for part in parts
    ]
    done = {
        **response,
        "status": "completed",
        "usage": {"input_tokens": 36, "output_tokens": len(parts), "total_tokens": 99},
    }
    events.append({"type": "response.completed", "response": done})
    return b"".join(
        sse({**event, "sequence_number": n}, event["type"]) for n, event in enumerate(events)
    )


def anthropic_body(parts: list[str]) -> bytes:
    message: dict[str, Any] = {
        "id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-sonnet-4-5",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 25, "output_tokens": 1},
    }
    out = [
        sse({"type": "message_start", "message": message}, "message_start"),
        sse(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            "content_block_start",
        ),
        sse({"type": "ping"}, "ping"),
    ]
    out += [
        sse(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": part},
            },
            "content_block_delta",
        )
        for part in parts
    ]
    out += [
        sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
        sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": len(parts)},
            },
            "message_delta",
        ),
        sse({"type": "message_stop"}, "message_stop"),
    ]
    return b"".join(out)


def reads(body: bytes) -> list[bytes]:
    return [body[i : i + READ_SIZE] for i in range(0, len(body), READ_SIZE)]


Run = tuple[str, str | None, float]  # text, finish reason, seconds to the first delta


# -- peers -----------------------------------------------------------------------------------


def unbroken_peer(dialect: str, trace: bool) -> Callable[[list[bytes]], Run]:
    from unbroken._receiver import StreamReceiver
    from unbroken.events import TextDelta

    def run(chunks: list[bytes]) -> Run:
        start = time.perf_counter()
        first = 0.0
        receiver = StreamReceiver(dialect, trace=trace)
        for data in chunks:
            frames = receiver.receive_data(data)
            if not first:
                for frame in frames:
                    if any(type(event) is TextDelta for event in frame.events):
                        first = time.perf_counter() - start
                        break
        receiver.receive_eof()
        message = receiver.message
        reason = message.finish_reason.value if message.finish_reason else None
        return message.text, reason, first

    return run


def floor_peer(kind: str) -> Callable[[list[bytes]], Run]:
    def run(chunks: list[bytes]) -> Run:
        start = time.perf_counter()
        first = 0.0
        body = b"".join(chunks)
        parts: list[str] = []
        reason = None
        for block in body.split(b"\n\n"):
            at = block.find(b"data: ")
            if at < 0 or block[at + 6 :] == b"[DONE]":
                continue
            payload = json.loads(block[at + 6 :])
            if kind == "chat":
                choice = payload["choices"][0]
                if choice["delta"].get("content"):
                    parts.append(choice["delta"]["content"])
                reason = choice["finish_reason"] or reason
            elif payload["type"] == "content_block_delta":
                parts.append(payload["delta"]["text"])
            elif payload["type"] == "message_delta":
                reason = payload["delta"]["stop_reason"]
            if parts and not first:
                first = time.perf_counter() - start
        return "".join(parts), "stop" if reason in ("stop", "end_turn") else reason, first

    return run


def httpx_sse_peer(kind: str) -> Callable[[list[bytes]], Run]:
    import httpx
    from httpx_sse import connect_sse

    def run(chunks: list[bytes]) -> Run:
        transport = httpx.MockTransport(
            lambda request: httpx.Response(
                200, headers={"content-type": "text/event-stream"}, content=iter(chunks)
            )
        )
        with httpx.Client(transport=transport) as client:
            start = time.perf_counter()
            first = 0.0
            parts: list[str] = []
            reason = None
            with connect_sse(client, "POST", "http://test/stream") as source:
                for event in source.iter_sse():
                    if event.data == "[DONE]":
                        continue
                    payload = json.loads(event.data)
                    if kind == "chat":
                        choice = payload["choices"][0]
                        if choice["delta"].get("content"):
                            parts.append(choice["delta"]["content"])
                        reason = choice["finish_reason"] or reason
                    elif payload["type"] == "content_block_delta":
                        parts.append(payload["delta"]["text"])
                    elif payload["type"] == "message_delta":
                        reason = payload["delta"]["stop_reason"]
                    if parts and not first:
                        first = time.perf_counter() - start
        return "".join(parts), "stop" if reason in ("stop", "end_turn") else reason, first

    return run


def sdk_transport(chunks: list[bytes]) -> Any:
    import httpx2

    return httpx2.Client(
        transport=httpx2.MockTransport(
            lambda request: httpx2.Response(
                200, headers={"content-type": "text/event-stream"}, content=iter(chunks)
            )
        )
    )


def openai_chat_peer(chunks: list[bytes]) -> Run:
    import openai

    client = openai.OpenAI(
        api_key="sk-bench",
        base_url="http://test/v1",
        http_client=sdk_transport(chunks),
        max_retries=0,
    )
    start = time.perf_counter()
    first = 0.0
    parts: list[str] = []
    reason = None
    for chunk in client.chat.completions.create(model="m", messages=[], stream=True):
        choice = chunk.choices[0]
        if choice.delta.content:
            parts.append(choice.delta.content)
            if not first:
                first = time.perf_counter() - start
        reason = choice.finish_reason or reason
    return "".join(parts), reason, first


def openai_responses_peer(chunks: list[bytes]) -> Run:
    import openai

    client = openai.OpenAI(
        api_key="sk-bench",
        base_url="http://test/v1",
        http_client=sdk_transport(chunks),
        max_retries=0,
    )
    start = time.perf_counter()
    first = 0.0
    parts: list[str] = []
    reason = None
    for event in client.responses.create(model="m", input="x", stream=True):
        if event.type == "response.output_text.delta":
            parts.append(event.delta)
            if not first:
                first = time.perf_counter() - start
        elif event.type == "response.completed":
            reason = "stop"
    return "".join(parts), reason, first


def anthropic_raw_peer(chunks: list[bytes]) -> Run:
    import anthropic

    client = anthropic.Anthropic(
        api_key="sk-bench", base_url="http://test", http_client=sdk_transport(chunks), max_retries=0
    )
    start = time.perf_counter()
    first = 0.0
    parts: list[str] = []
    reason = None
    for event in client.messages.create(model="m", max_tokens=9, messages=[], stream=True):
        if event.type == "content_block_delta" and event.delta.type == "text_delta":
            parts.append(event.delta.text)
            if not first:
                first = time.perf_counter() - start
        elif event.type == "message_delta":
            reason = event.delta.stop_reason
    return "".join(parts), "stop" if reason == "end_turn" else reason, first


def anthropic_text_peer(chunks: list[bytes]) -> Run:
    import anthropic

    client = anthropic.Anthropic(
        api_key="sk-bench", base_url="http://test", http_client=sdk_transport(chunks), max_retries=0
    )
    start = time.perf_counter()
    first = 0.0
    parts: list[str] = []
    with client.messages.stream(model="m", max_tokens=9, messages=[]) as stream:
        for text in stream.text_stream:
            parts.append(text)
            if not first:
                first = time.perf_counter() - start
        reason = stream.get_final_message().stop_reason
    return "".join(parts), "stop" if reason == "end_turn" else reason, first


def client_peer(dialect: str) -> Callable[[list[bytes]], Run]:
    """``unbroken.stream`` over an in-process transport (what telemetry hooks into)."""
    import unbroken

    def run(chunks: list[bytes]) -> Run:
        start = time.perf_counter()
        first = 0.0
        with sdk_transport(chunks) as http, unbroken.stream(
            "POST", "http://test/v1/chat/completions", dialect=dialect, client=http,
            json={"model": "gpt-4.1", "stream": True}, trace=False,
        ) as s:
            for _text in s.iter_text():
                if not first:
                    first = time.perf_counter() - start
        message = s.message
        reason = message.finish_reason.value if message.finish_reason else None
        return message.text, reason, first

    return run


def otel_cost(deltas: int, repeat: int) -> None:
    """CPU per frame of ``unbroken.stream`` with telemetry off and on, interleaved."""
    from collections.abc import Sequence

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from unbroken import telemetry

    class Discard(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(Discard()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    makers = {"openai-chat": chat_body, "anthropic": anthropic_body}
    print(f"unbroken.stream, {deltas} deltas per body, {READ_SIZE}-byte reads, trace off; "
          f"CPU (process_time) per frame, best of {repeat} interleaved runs")
    print(f"{'dialect':<12} {'otel off us':>12} {'otel on us':>11} {'on/off':>7} "
          f"{'each us':>8} {'each/off':>9}")
    modes: tuple[str | None, ...] = (None, "mean", "each")  # chunk_intervals; None: off
    for dialect, maker in makers.items():
        parts = words(deltas)
        body = maker(parts)
        chunks, expected = reads(body), "".join(parts)
        run = client_peer(dialect)
        best = dict.fromkeys(modes, float("inf"))
        for _ in range(repeat):
            for mode in modes:
                if mode is not None:
                    telemetry.instrument(tracer_provider=tracer_provider,
                                         meter_provider=meter_provider,
                                         chunk_intervals=mode)  # type: ignore[arg-type]
                cpu = time.process_time()
                text, reason, _first = run(chunks)
                used = time.process_time() - cpu
                telemetry.uninstrument()
                if (text, reason) != (expected, "stop"):
                    raise SystemExit(f"{dialect}: wrong result {text[:40]!r}… / {reason!r}")
                best[mode] = min(best[mode], used / frames(body) * 1e6)
        off = best[None]
        print(f"{dialect:<12} {off:>12.2f} {best['mean']:>11.2f} {best['mean'] / off:>7.3f} "
              f"{best['each']:>8.2f} {best['each'] / off:>9.3f}")
    tracer_provider.shutdown()
    meter_provider.shutdown()


# -- harness ---------------------------------------------------------------------------------


def measure(
    run: Callable[[list[bytes]], Run], body: bytes, expected: str, repeat: int
) -> tuple[float, float]:
    """Best total seconds and best time to first delta over ``repeat`` runs."""
    chunks = reads(body)
    best = best_first = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        text, reason, first = run(chunks)
        elapsed = time.perf_counter() - start
        if (text, reason) != (expected, "stop"):
            raise SystemExit(f"{run!r}: wrong result {text[:40]!r}… / {reason!r}")
        best, best_first = min(best, elapsed), min(best_first, first)
    return best, best_first


def frames(body: bytes) -> int:
    return body.count(b"\n\n")


def peers(unbroken_only: bool) -> list[tuple[str, str, Callable[[list[bytes]], Run]]]:
    found: list[tuple[str, str, Callable[[list[bytes]], Run]]] = [
        ("chat", "unbroken parse, trace off", unbroken_peer("openai-chat", False)),
        ("chat", "unbroken parse, trace on", unbroken_peer("openai-chat", True)),
        ("responses", "unbroken parse, trace off", unbroken_peer("openai-responses", False)),
        ("anthropic", "unbroken parse, trace off", unbroken_peer("anthropic", False)),
        ("anthropic", "unbroken parse, trace on", unbroken_peer("anthropic", True)),
    ]
    if unbroken_only:
        return found
    return [
        *found,
        ("chat", "openai SDK chat.completions", openai_chat_peer),
        ("responses", "openai SDK responses", openai_responses_peer),
        ("anthropic", "anthropic SDK raw create loop", anthropic_raw_peer),
        ("anthropic", "anthropic SDK messages.stream text", anthropic_text_peer),
        ("chat", "httpx-sse + json.loads", httpx_sse_peer("chat")),
        ("anthropic", "httpx-sse + json.loads", httpx_sse_peer("anthropic")),
        ("chat", "floor (split + json.loads)", floor_peer("chat")),
        ("anthropic", "floor (split + json.loads)", floor_peer("anthropic")),
    ]


def table(deltas: int, small: int, repeat: int, unbroken_only: bool) -> list[dict[str, Any]]:
    makers = {"chat": chat_body, "responses": responses_body, "anthropic": anthropic_body}
    rows = []
    for kind, name, run in peers(unbroken_only):
        per_event = []
        first = 0.0
        warm = words(50)
        measure(run, makers[kind](warm), "".join(warm), 1)  # imports, clients, caches
        for n in (small, deltas):
            parts = words(n)
            body = makers[kind](parts)
            seconds, first = measure(run, body, "".join(parts), repeat)
            per_event.append(seconds / frames(body) * 1e6)
        rows.append(
            {
                "body": kind,
                "peer": name,
                "us": per_event[1],
                "small_us": per_event[0],
                "first_ms": first * 1e3,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deltas", type=int, default=20_000)
    parser.add_argument("--small", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stdlib-json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--otel", action="store_true",
                        help="CPU per frame of unbroken.stream with OpenTelemetry off and on")
    args = parser.parse_args()
    if args.otel:
        otel_cost(args.deltas, max(args.repeat, 5))
        return
    if args.stdlib_json:  # the child run: unbroken with the standard json module only
        sys.modules["orjson"] = None  # type: ignore[assignment]
        print(json.dumps(table(args.deltas, args.small, args.repeat, unbroken_only=True)))
        return
    from unbroken._jsonparse import BACKEND

    rows = table(args.deltas, args.small, args.repeat, unbroken_only=False)
    for row in rows:
        if row["peer"].startswith("unbroken"):
            row["peer"] += f" ({BACKEND})"
    child = subprocess.run(
        [
            sys.executable,
            __file__,
            "--stdlib-json",
            f"--deltas={args.deltas}",
            f"--small={args.small}",
            f"--repeat={args.repeat}",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    for row in json.loads(child.stdout):
        rows.append({**row, "peer": row["peer"] + " (json)"})
    report(rows, args.deltas, args.small)


def report(rows: list[dict[str, Any]], deltas: int, small: int) -> None:
    floors = {row["body"]: row["us"] for row in rows if row["peer"].startswith("floor")}
    floors["responses"] = floors["chat"]
    print(
        f"{deltas} deltas per body, {READ_SIZE}-byte reads; best of runs; python "
        f"{sys.version.split()[0]}"
    )
    print(
        f"{'body':<10} {'peer':<44} {'us/event':>9} {'x floor':>8} {'1st delta':>10} "
        f"{'us/ev @' + str(small):>11} {'growth':>7}"
    )
    for row in rows:
        print(
            f"{row['body']:<10} {row['peer']:<44} {row['us']:>9.2f} "
            f"{row['us'] / floors[row['body']]:>8.2f} {row['first_ms']:>8.2f}ms "
            f"{row['small_us']:>11.2f} {row['us'] / row['small_us']:>7.2f}"
        )
    print()
    print("ratios (peer us/event / unbroken trace-off us/event, same body):")
    ours = {
        row["body"]: row["us"]
        for row in rows
        if row["peer"].startswith("unbroken parse, trace off (") and "(json)" not in row["peer"]
    }
    for row in rows:
        if not row["peer"].startswith("unbroken"):
            print(f"  {row['body']:<10} {row['peer']:<44} {row['us'] / ours[row['body']]:>7.1f}x")


if __name__ == "__main__":
    main()
