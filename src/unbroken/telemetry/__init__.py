"""OpenTelemetry for unbroken's streams: GenAI spans and metrics (optional extra ``otel``).

Off until ``instrument()`` is called; then every stream this process runs — ``unbroken.stream``
/ ``astream``, the SDK wrappers (``from_openai`` ...), the proxy's upstream streams and
``unbroken.server.ResumableStreams`` — ends as one span and its metrics, through the global
tracer and meter providers unless others are given. Nothing here imports ``opentelemetry``
until ``instrument()`` does: without the extra, or before the call, a stream pays one ``None``
check per frame and nothing else.

What a stream records (``otel.py`` writes it; the names follow the OpenTelemetry GenAI semantic
conventions, ``gen_ai.*``, with unbroken's own attributes under ``unbroken.``):

- one CLIENT span ``{gen_ai.operation.name} {gen_ai.request.model}`` from the request to the
  end, however many connections it took. A resume (a reconnect by ``Last-Event-ID``, an upstream
  continuation, a reader re-attaching to a proxied stream) and a retry are events on it, never
  a second span: usage and latency are counted once.
- ``gen_ai.client.operation.duration``, ``gen_ai.client.token.usage``,
  ``gen_ai.client.operation.time_to_first_chunk`` and
  ``gen_ai.client.operation.time_per_output_chunk``. The first chunk is the first frame with
  output (``_receiver.OUTPUT_EVENTS``: text, reasoning or a tool call), never a lifecycle event; a
  stream that ended before any output has none.
- time per output chunk: by default one point per stream, the mean interval between its output
  frames (``chunk_intervals="mean"``); ``instrument(chunk_intervals="each")`` records one point
  per output frame after the first, as the conventions define it: the time from the previous
  output frame's read to this one's (zero for frames completed by the same read). "each" costs
  one histogram point per frame, about as much as unbroken's own work on a frame (see
  ``benchmarks/README.md``); a stream's intervals are held at the end (``HELD_INTERVALS`` at
  most, then written mid-stream without the response's model and error).

Prompt and completion text stay out unless asked for: ``instrument(capture_content=True)`` or
the conventions' environment variable ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``.
Then the span carries ``gen_ai.input.messages`` and ``gen_ai.system_instructions`` (the request
body as its dialect reads it, ``Dialect.genai_input``: media by their type only, never their
bytes) and ``gen_ai.output.messages``. An SDK wrapper knows the request only where the SDK keeps
it on its stream (openai, anthropic).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from .observation import Observation, StreamRecorder

if TYPE_CHECKING:
    from ..dialects.base import DialectBase

__all__ = ["CAPTURE_CONTENT_ENV", "DURATION_BUCKETS", "Observation", "StreamRecorder",
           "instrument", "instrumented", "observe", "uninstrument"]

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
# The GenAI conventions' advice for the buckets of operation duration and time to first chunk
# (seconds); the proxy's Prometheus histograms use them too.
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                    40.96, 81.92)

_recorder: StreamRecorder | None = None


def instrument(
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    capture_content: bool | None = None,
    chunk_intervals: Literal["mean", "each"] = "mean",
) -> None:
    """Record every stream of this process from now on (see the module docstring).

    ``tracer_provider`` / ``meter_provider``: OpenTelemetry providers; the global ones when
    ``None``. ``capture_content``: put the prompt and the completion on the span (see above);
    ``None`` reads ``CAPTURE_CONTENT_ENV`` (``true`` turns it on). Raises ``ImportError``
    naming the extra when opentelemetry-api is not installed. ``chunk_intervals``: ``"mean"``
    (one time-per-output-chunk point per stream) or ``"each"`` (one per output frame).
    """
    global _recorder
    if chunk_intervals not in ("mean", "each"):
        raise ValueError(f"chunk_intervals is 'mean' or 'each', not {chunk_intervals!r}")
    try:
        from .otel import OTelRecorder
    except ImportError as exc:  # pragma: no cover - the test environment has the extra
        raise ImportError("unbroken.telemetry needs opentelemetry-api: "
                          "pip install 'unbroken[otel]'") from exc
    if capture_content is None:
        capture_content = os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() == "true"
    _recorder = OTelRecorder(tracer_provider=tracer_provider, meter_provider=meter_provider,
                             capture_content=capture_content,
                             each_chunk=chunk_intervals == "each")


def uninstrument() -> None:
    """Stop recording new streams (streams already observed still end their span)."""
    global _recorder
    _recorder = None


def instrumented() -> bool:
    return _recorder is not None


def observe(
    component: str,
    *,
    dialect: type[DialectBase] | None = None,
    url: str | None = None,
    body: bytes | None = None,
    started: float | None = None,
    headers: Sequence[tuple[str, str]] | None = None,
) -> Observation | None:
    """An ``Observation`` of one stream starting now (or at monotonic ``started``), or
    ``None`` when telemetry is off: the caller's hooks test for ``None`` and do nothing else.

    ``component``: ``client``, ``sdk``, ``proxy`` or ``server``. ``dialect`` may be told later
    (``dialect="auto"``, an SDK wrapper that learns it from the first object); ``url`` and
    ``body`` give the server address and the requested model; ``headers``, those of a request
    received (the proxy's), may carry a W3C ``traceparent`` the span continues."""
    recorder = _recorder
    if recorder is None:
        return None
    return Observation(recorder, component, dialect=dialect, url=url, body=body, started=started,
                       headers=headers)
