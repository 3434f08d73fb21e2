"""Limits, idempotency hashes, metrics exposition, logfmt lines and CLI flags of the hardened
proxy, without servers."""

from __future__ import annotations

import argparse
import logging
from collections.abc import AsyncIterator

import pytest

from unbroken.finish import Status
from unbroken.proxy.__main__ import build_parser, config_from_args
from unbroken.proxy.config import ProxyConfig
from unbroken.proxy.metrics import ProxyMetrics
from unbroken.streams.access import secret_hash
from unbroken.streams.idempotency import PendingKeys, idempotency_hash, request_hash
from unbroken.streams.journal import FrameRecord, StreamState
from unbroken.streams.limits import StreamSlots, body_refusal, read_body
from unbroken.streams.logs import LogfmtFormatter, log_event


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_stream_slots_refuse_per_key_then_in_total_and_give_back() -> None:
    slots = StreamSlots(max_streams=3, max_streams_per_key=2)
    assert slots.take("a") is None and slots.take("a") is None
    refused = slots.take("a")
    assert refused is not None
    assert (refused.status, refused.headers) == (429, {"retry-after": "1"})
    assert refused.message == ("unbroken proxy: this credential has 2 live streams "
                               "(--max-streams-per-key)")
    assert slots.take(None) is None  # no credential: counted in the total only
    full = slots.take("b")
    assert full is not None and full.status == 503 and full.headers == {"retry-after": "1"}
    assert (slots.live, slots.of("a"), slots.of("b"), slots.of(None)) == (3, 2, 0, 0)
    slots.give_back("a")
    assert slots.take("b") is None
    assert (slots.live, slots.of("a"), slots.of("b")) == (3, 1, 1)
    unlimited = StreamSlots(max_streams=None, max_streams_per_key=None)
    assert all(unlimited.take("k") is None for _ in range(100))


def test_body_refusal_from_content_length() -> None:
    assert body_refusal("2049", 2048) is not None
    refused = body_refusal(" 2049 ", 2048)
    assert refused is not None and refused.status == 413
    assert refused.message == "unbroken proxy: the request body is over --max-body (2048 bytes)"
    assert body_refusal("2048", 2048) is None
    assert body_refusal(None, 2048) is None
    assert body_refusal("5000", None) is None
    assert body_refusal("-1", 10) is None  # not a length: the body is counted as it comes


@pytest.mark.anyio
async def test_read_body_counts_chunks() -> None:
    async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
        for part in parts:
            yield part

    assert await read_body(chunks(b"ab", b"cd"), 4) == b"abcd"
    refused = await read_body(chunks(b"ab", b"cd", b"e"), 4)
    assert not isinstance(refused, bytes) and refused.status == 413
    assert await read_body(chunks(b"x" * 100), None) == b"x" * 100


@pytest.mark.anyio
async def test_idempotency_hashes_and_pending_keys() -> None:
    credential = secret_hash("sk-1")
    key = idempotency_hash({"idempotency-key": "order-1"}, credential)
    assert key is not None and len(key) == 64 and "order-1" not in key
    assert key == idempotency_hash({"idempotency-key": " order-1 "}, credential)
    assert key != idempotency_hash({"idempotency-key": "order-1"}, secret_hash("sk-2"))
    assert idempotency_hash({"idempotency-key": "order-1"}, None) is None
    assert idempotency_hash({}, credential) is None
    long_a, long_b = "k" * 300 + "a", "k" * 300 + "b"  # the whole key counts
    assert idempotency_hash({"idempotency-key": long_a}, credential) != idempotency_hash(
        {"idempotency-key": long_b}, credential)
    # The same JSON in another key order and spacing is the same request.
    assert request_hash("/v1/x", b'{"a": 1, "b": [1, 2]}') == request_hash(
        "/v1/x", b'{"b":[1,2],"a":1}')
    assert request_hash("/v1/x", b'{"a": 1}') != request_hash("/v1/y", b'{"a": 1}')
    assert request_hash("/v1/x", b'{"a": 1}') != request_hash("/v1/x", b'{"a": 2}')
    assert request_hash("/v1/x", b"\xff not json") == request_hash("/v1/x", b"\xff not json")

    pending = PendingKeys()
    assert pending.claim("k") is None
    waiting = pending.claim("k")
    assert waiting is not None and not waiting.done()
    pending.settle("k", "ub_1")
    assert waiting.result() == "ub_1"
    assert pending.claim("k") is None  # settled: the next one goes first again


def test_metrics_follow_landed_appends_and_render_prometheus_text() -> None:
    metrics = ProxyMetrics()
    frames = [FrameRecord(1, None, b"{}"), FrameRecord(2, None, b"{}")]
    metrics.landed("s1", frames, StreamState(status=Status.STREAMING, updated=0, last_seq=2))
    metrics.landed("s1", [FrameRecord(3, None, b"{}")],
                   StreamState(status=Status.STREAMING, updated=0, last_seq=3))
    metrics.landed("s1", [FrameRecord(4, "error", b"{}")], StreamState(
        status=Status.INTERRUPTED, updated=0, last_seq=4,
        error={"type": "TransportError", "message": "broke"}))
    metrics.landed("s3", [], StreamState(status=Status.STREAMING, updated=0,
                                         upstream_requests=2))
    metrics.landed("s3", [], StreamState(status=Status.COMPLETED, updated=0,
                                         upstream_requests=4))
    metrics.landed("s2", [], StreamState(status=Status.FAILED, updated=0,
                                         error={"type": "overloaded_error", "message": "x"}))
    metrics.committed(0.0007)
    metrics.committed(0.2)
    metrics.resumes += 2
    text = metrics.render(active_streams=1, readers=3)
    lines = text.splitlines()
    for line in [
        "unbroken_active_streams 1", "unbroken_readers 3", "unbroken_frames_total 4",
        "unbroken_resumes_total 2", "unbroken_streams_interrupted_total 1",
        "unbroken_upstream_resumes_total 2",
        'unbroken_streams_ended_total{status="completed"} 1',
        'unbroken_streams_ended_total{status="failed"} 1',
        'unbroken_streams_ended_total{status="interrupted"} 1',
        'unbroken_upstream_errors_total{kind="broken"} 1',
        'unbroken_upstream_errors_total{kind="provider_error"} 1',
        'unbroken_journal_commit_seconds_bucket{le="0.0005"} 0',
        'unbroken_journal_commit_seconds_bucket{le="0.001"} 1',
        'unbroken_journal_commit_seconds_bucket{le="0.25"} 2',
        'unbroken_journal_commit_seconds_bucket{le="+Inf"} 2',
        "unbroken_journal_commit_seconds_count 2",
        "# TYPE unbroken_journal_commit_seconds histogram",
        "# TYPE unbroken_frames_total counter",
    ]:
        assert line in lines, line
    assert text.endswith("\n")


def _record(msg: str, *args: object, fields: dict[str, object] | None = None) -> str:
    record = logging.LogRecord("unbroken.proxy", logging.INFO, __file__, 1, msg, args, None)
    record.created = 0.0
    record.msecs = 5.0
    if fields is not None:
        record.fields = fields
        record.event_name = msg
    return LogfmtFormatter().format(record)


def test_logfmt_lines_quote_what_needs_it_and_redact() -> None:
    assert _record("stream.status", fields={"stream_id": "ub_1", "seq": 7, "status": "completed",
                                            "upstream_ms": 1.23456789}) == (
        "ts=1970-01-01T00:00:00.005Z level=info logger=unbroken.proxy event=stream.status "
        "stream_id=ub_1 seq=7 status=completed upstream_ms=1.234568"
    )
    assert _record('%s "%s"', "127.0.0.1:5", "GET /v1beta/m?alt=sse&key=AIza-1") == (
        'ts=1970-01-01T00:00:00.005Z level=info logger=unbroken.proxy '
        'msg="127.0.0.1:5 \\"GET /v1beta/m?alt=sse&key=REDACTED\\""'
    )
    assert _record("x", fields={"reason": "two words", "ok": True}).endswith(
        'event=x reason="two words" ok=true')


def test_cli_flags_reach_the_config() -> None:
    parser = build_parser()
    args = parser.parse_args([
        "--max-body", "2k", "--max-streams-per-key", "2", "--max-streams", "30",
        "--idle-close", "3s", "--shutdown-grace", "1m", "--lease-ttl", "2",
        "--lease-renew", "0.5", "--max-event-size", "1MiB",
    ])
    config = config_from_args(args)
    assert (config.max_body, config.max_streams_per_key, config.max_streams) == (2048, 2, 30)
    assert (config.idle_close, config.shutdown_grace) == (3.0, 60.0)
    assert (config.lease_ttl, config.lease_renew, config.max_event_size) == (2.0, 0.5, 2**20)
    defaults = config_from_args(parser.parse_args([]))
    assert (defaults.max_body, defaults.max_streams, defaults.max_streams_per_key) == (
        32 * 2**20, None, None)
    for bad in (["--max-body", "lots"], ["--max-streams", "0"], ["--shutdown-grace", "x"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)
    with pytest.raises(ValueError, match="lease_renew must be shorter"):
        ProxyConfig(lease_ttl=1, lease_renew=1)
    with pytest.raises(ValueError, match="max_streams must be a positive integer"):
        ProxyConfig(max_streams=0)
    assert isinstance(args, argparse.Namespace)


def test_log_event_reads_whole_under_any_formatter(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="unbroken.proxy"):
        log_event("stream.status", stream_id="ub_1", seq=3, status="completed", error=None,
                  reason="two words")
    assert caplog.messages == [
        'stream.status stream_id=ub_1 seq=3 status=completed reason="two words"']
    assert _record("stream.status", fields=caplog.records[0].fields).endswith(  # type: ignore[attr-defined]
        'event=stream.status stream_id=ub_1 seq=3 status=completed reason="two words"')
