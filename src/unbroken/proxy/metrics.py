"""``GET /metrics``: the proxy's counters in the Prometheus text format (version 0.0.4).

``ProxyMetrics`` is also the journal's observer: every append that lands passes through
``landed`` (frames journaled, status changes, how streams end) and every group commit through
``committed`` (its latency), so one place sees the truth as stored, whichever code wrote it
(a producer, crash recovery, a cancel). Status changes are logged there too, with the seq.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..finish import Status
from ..streams.journal import FrameRecord, StreamState
from ..streams.logs import log_event
from ..telemetry import DURATION_BUCKETS

__all__ = ["CONTENT_TYPE", "Histogram", "ProxyMetrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_GENAI_BUCKETS = DURATION_BUCKETS  # the GenAI conventions' advice, as telemetry records it
# Errors whose cause is the upstream (a broken or silent connection, a malformed body, an
# error the provider reported), as journaled in a stream's state.
_UPSTREAM_ERRORS = frozenset({"TransportError", "IdleTimeout", "DecodingError", "PayloadError",
                              "EventTooLargeError", "TruncatedError"})


@dataclass(slots=True)
class Histogram:
    """A cumulative histogram with fixed upper bounds (seconds)."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.bounds)

    def observe(self, value: float) -> None:
        self.total += value
        self.count += 1
        for index, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[index] += 1
                break

    def lines(self, name: str, labels: str = "") -> list[str]:
        """The exposition lines; ``labels`` (``dialect="anthropic"``) go on each of them."""
        out: list[str] = []
        running = 0
        first = labels + "," if labels else ""
        own = "{" + labels + "}" if labels else ""
        for bound, count in zip(self.bounds, self.counts, strict=True):
            running += count
            out.append(f'{name}_bucket{{{first}le="{bound:g}"}} {running}')
        out.append(f'{name}_bucket{{{first}le="+Inf"}} {self.count}')
        out.append(f"{name}_sum{own} {self.total:.6f}")
        out.append(f"{name}_count{own} {self.count}")
        return out


class ProxyMetrics:
    """Counters of one proxy process (they start at zero with the process)."""

    def __init__(self) -> None:
        self.streams_started = 0
        self.frames = 0
        self.resumes = 0
        self.idempotent_attaches = 0
        self.interrupted = 0
        self.ended: Counter[str] = Counter()
        self.upstream_errors: Counter[str] = Counter()
        self.refusals: Counter[int] = Counter()
        self.commit_seconds = Histogram(_COMMIT_BUCKETS)
        self.upstream_seconds = Histogram(_LATENCY_BUCKETS)
        self.upstream_resumes = 0
        # Per (dialect, end status) and per dialect, for the streams this process produced.
        self.stream_seconds: dict[tuple[str, str], Histogram] = {}
        self.first_chunk_seconds: dict[str, Histogram] = {}
        self._status: dict[str, Status] = {}  # last status seen per stream not yet ended
        self._requests: dict[str, int] = {}  # upstream requests seen per stream not yet ended

    # -- the journal's observer ---------------------------------------------------------------

    def landed(self, stream_id: str, frames: Sequence[FrameRecord], state: StreamState) -> None:
        self.frames += len(frames)
        requests = self._requests.get(stream_id, state.upstream_requests)
        self.upstream_resumes += max(0, state.upstream_requests - requests)
        if state.ended:
            self._requests.pop(stream_id, None)
        else:
            self._requests[stream_id] = state.upstream_requests
        before = self._status.get(stream_id)
        if before is state.status:
            return
        if state.ended:
            self._status.pop(stream_id, None)
            self.ended[state.status.value] += 1
            if state.status is Status.INTERRUPTED:
                self.interrupted += 1
            error_type = (state.error or {}).get("type")
            if state.status is Status.FAILED and error_type is not None:
                self.upstream_errors["provider_error" if error_type not in _UPSTREAM_ERRORS
                                     else "malformed"] += 1
            elif error_type in _UPSTREAM_ERRORS:
                self.upstream_errors["broken"] += 1
        else:
            self._status[stream_id] = state.status
        level = logging.WARNING if state.status in (Status.INTERRUPTED, Status.FAILED) \
            else logging.INFO
        log_event("stream.status", level=level, stream_id=stream_id, seq=state.last_seq,
                  status=state.status.value, finish_reason=state.finish_reason,
                  error=(state.error or {}).get("type"),
                  reason=(state.error or {}).get("message") if state.ended else None)

    def committed(self, seconds: float) -> None:
        self.commit_seconds.observe(seconds)

    # -- told by the producers ----------------------------------------------------------------

    def first_chunk(self, dialect: str, seconds: float) -> None:
        """A stream's first output frame arrived ``seconds`` after its upstream request was
        sent (``receiver.OUTPUT_EVENTS``: never a lifecycle event)."""
        histogram = self.first_chunk_seconds.get(dialect)
        if histogram is None:
            histogram = self.first_chunk_seconds[dialect] = Histogram(_GENAI_BUCKETS)
        histogram.observe(seconds)

    def stream_ended(self, dialect: str, status: Status, seconds: float) -> None:
        """A stream this process produced ended ``status``, ``seconds`` after its upstream
        request was sent."""
        key = (dialect, status.value)
        histogram = self.stream_seconds.get(key)
        if histogram is None:
            histogram = self.stream_seconds[key] = Histogram(_GENAI_BUCKETS)
        histogram.observe(seconds)

    # -- exposition ---------------------------------------------------------------------------

    def render(self, *, active_streams: int, readers: int) -> str:
        """The Prometheus text exposition of every metric."""
        out: list[str] = []

        def metric(name: str, kind: str, help_text: str, lines: list[str]) -> None:
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(lines)

        metric("unbroken_active_streams", "gauge", "Streams being produced by this process.",
               [f"unbroken_active_streams {active_streams}"])
        metric("unbroken_readers", "gauge", "Downstream readers attached to live streams.",
               [f"unbroken_readers {readers}"])
        metric("unbroken_streams_started_total", "counter", "Streams created (one generation "
               "each).", [f"unbroken_streams_started_total {self.streams_started}"])
        metric("unbroken_frames_total", "counter", "Frames journaled.",
               [f"unbroken_frames_total {self.frames}"])
        metric("unbroken_resumes_total", "counter", "Downstream resumes (Last-Event-ID, "
               "?after=, re-attach).", [f"unbroken_resumes_total {self.resumes}"])
        metric("unbroken_upstream_resumes_total", "counter", "Upstream requests that continued "
               "a stream (Responses starting_after).",
               [f"unbroken_upstream_resumes_total {self.upstream_resumes}"])
        metric("unbroken_idempotent_attaches_total", "counter",
               "Requests with a known Idempotency-Key attached to their stream.",
               [f"unbroken_idempotent_attaches_total {self.idempotent_attaches}"])
        metric("unbroken_streams_interrupted_total", "counter", "Streams that ended "
               "interrupted.", [f"unbroken_streams_interrupted_total {self.interrupted}"])
        metric("unbroken_streams_ended_total", "counter", "Streams ended, by status.",
               [f'unbroken_streams_ended_total{{status="{status}"}} {count}'
                for status, count in sorted(self.ended.items())])
        metric("unbroken_upstream_errors_total", "counter", "Upstream failures, by kind.",
               [f'unbroken_upstream_errors_total{{kind="{kind}"}} {count}'
                for kind, count in sorted(self.upstream_errors.items())])
        metric("unbroken_refusals_total", "counter", "Requests refused by a limit, by status.",
               [f'unbroken_refusals_total{{status="{status}"}} {count}'
                for status, count in sorted(self.refusals.items())])
        metric("unbroken_journal_commit_seconds", "histogram",
               "Latency of one journal group commit.",
               self.commit_seconds.lines("unbroken_journal_commit_seconds"))
        metric("unbroken_upstream_response_seconds", "histogram",
               "Time from sending a stream's request upstream to its response headers.",
               self.upstream_seconds.lines("unbroken_upstream_response_seconds"))
        metric("unbroken_stream_seconds", "histogram",
               "Time from sending a stream's request upstream to its end, by dialect and end "
               "status (streams produced by this process).",
               [line for (dialect, status), histogram in sorted(self.stream_seconds.items())
                for line in histogram.lines("unbroken_stream_seconds",
                                            f'dialect="{dialect}",status="{status}"')])
        metric("unbroken_time_to_first_chunk_seconds", "histogram",
               "Time from sending a stream's request upstream to its first output frame (text, "
               "reasoning or a tool call; never a start, ping, usage or end), by dialect.",
               [line for dialect, histogram in sorted(self.first_chunk_seconds.items())
                for line in histogram.lines("unbroken_time_to_first_chunk_seconds",
                                            f'dialect="{dialect}"')])
        return "\n".join(out) + "\n"
