"""The OpenTelemetry recorder: an ended ``Observation`` and its ``Message`` become one GenAI span
and its metrics. The only module of unbroken that imports ``opentelemetry``.

Names follow the OpenTelemetry GenAI semantic conventions (client spans and metrics); every name
is written here once. Attributes of unbroken's own are under ``unbroken.``:

``unbroken.component``   client, sdk, proxy or server: which part of unbroken ran the stream
``unbroken.dialect``     the dialect name (``openai-chat`` ...)
``unbroken.status``      the end state (completed, truncated, filtered, interrupted, failed,
                         cancelled)
``unbroken.finish_reason`` the normalized finish reason, when one came
``unbroken.frames``      frames received; ``unbroken.resumes``, ``unbroken.retries`` the span's
                         resume and retry events; ``unbroken.duplicates`` frames dropped as
                         already seen; ``unbroken.gaps`` seq gaps; ``unbroken.stalls`` stalls
``unbroken.stream_id``   the proxy's or the server's stream id, when there is one

``error.type`` (and the span status ERROR) is set for ``failed`` and ``interrupted``: the
provider's error code when it sent one, else unbroken's error class, else the status. A
``cancelled`` stream is the caller's choice, not an error.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from opentelemetry import context, metrics, propagate, trace
from opentelemetry.trace import SpanKind, StatusCode

from .._version import __version__
from ..errors import ProviderError
from ..finish import Status
from ..message import Message
from . import DURATION_BUCKETS
from .observation import Observation, json_object, operation_name, request_model, server_of

__all__ = ["OTelRecorder"]

# The conventions' advice for the other histograms' buckets.
_CHUNK_BUCKETS: Sequence[float] = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                   0.75, 1.0, 2.5)
_TOKEN_BUCKETS: Sequence[int] = tuple(4**n for n in range(14))  # 1, 4, 16 ... 67108864
_ERRORS = (Status.FAILED, Status.INTERRUPTED)
# W3C trace context: a caller's span that the proxy's span continues.
_TRACE_HEADERS = frozenset({"traceparent", "tracestate"})


class OTelRecorder:
    """Writes ended streams through a tracer and a meter (the global providers by default)."""

    def __init__(self, *, tracer_provider: Any = None, meter_provider: Any = None,
                 capture_content: bool = False, each_chunk: bool = False) -> None:
        self.capture_content = capture_content
        self.each_chunk = each_chunk
        self._tracer = trace.get_tracer("unbroken", __version__, tracer_provider=tracer_provider)
        meter = metrics.get_meter("unbroken", __version__, meter_provider=meter_provider)
        self._duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS)
        self._tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS)
        self._first_chunk = meter.create_histogram(
            "gen_ai.client.operation.time_to_first_chunk", unit="s",
            description="Time to receive the first chunk (the first output frame).",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS)
        self._per_chunk = meter.create_histogram(
            "gen_ai.client.operation.time_per_output_chunk", unit="s",
            description="Time per output chunk after the first (each chunk's, or one "
                        "stream's mean: instrument(chunk_intervals=...)).",
            explicit_bucket_boundaries_advisory=_CHUNK_BUCKETS)

    def parent(self, headers: Sequence[tuple[str, str]] | None = None) -> Any:
        if headers:
            carrier = {name.lower(): value for name, value in headers
                       if name.lower() in _TRACE_HEADERS}
            if "traceparent" in carrier:
                return propagate.extract(carrier)
        return context.get_current()

    def trace_headers(self, parent: Any) -> dict[str, str]:
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=parent)
        return carrier

    def record(self, observation: Observation, message: Message) -> None:
        request = json_object(observation.body)  # parsed once, for the model and the prompt
        common = self._request_attributes(observation, request)
        operation = common["gen_ai.operation.name"]
        model = common.get("gen_ai.request.model")
        if message.model:
            common["gen_ai.response.model"] = message.model
        status = message.status
        error_type = _error_type(message) if status in _ERRORS else None
        if error_type is not None:
            common["error.type"] = error_type

        attributes = dict(common)
        if message.id:
            attributes["gen_ai.response.id"] = message.id
        raw_reason = message.raw_finish_reason
        if raw_reason:
            attributes["gen_ai.response.finish_reasons"] = [raw_reason]
        usage = message.usage
        if usage is not None:
            if usage.input_tokens is not None:
                attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
            if usage.output_tokens is not None:
                attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
        first_output = observation.first_output
        if first_output is not None:
            attributes["gen_ai.response.time_to_first_chunk"] = first_output - observation.started
        attributes.update(self._own(observation, message))
        if self.capture_content:
            attributes.update(_input_messages(observation, request))
            attributes["gen_ai.output.messages"] = _output_messages(message)

        name = f"{operation} {model}" if model else operation
        span = self._tracer.start_span(name, context=observation.parent, kind=SpanKind.CLIENT,
                                       attributes=attributes, start_time=observation.started_ns)
        for event, t, event_attributes in observation.events:
            span.add_event(event, event_attributes, timestamp=observation.ns(t))
        if error_type is not None:
            span.set_status(StatusCode.ERROR, str(message.error or status.value))
        ended_at = observation.ended_at
        assert ended_at is not None
        span.end(end_time=observation.ns(ended_at))

        self._duration.record(ended_at - observation.started, common)
        if usage is not None:
            for kind, count in (("input", usage.input_tokens), ("output", usage.output_tokens)):
                if count is not None:
                    self._tokens.record(count, {**common, "gen_ai.token.type": kind})
        if first_output is not None:
            self._first_chunk.record(first_output - observation.started, common)
            if self.each_chunk:
                self._record_intervals(observation, common)
            elif observation.outputs > 1:
                # By default one point per stream, the mean of its chunk intervals: one point
                # per chunk costs each frame of a fast stream more than unbroken's own work.
                self._per_chunk.record((observation.last_output - first_output)
                                       / (observation.outputs - 1), common)

    def record_chunks(self, observation: Observation) -> None:
        """A long stream's buffer of intervals is full: they are recorded now, with what is
        known of the request (the response's model and the error, if any, come at the end)."""
        self._record_intervals(observation, self._request_attributes(
            observation, json_object(observation.body)))

    def _record_intervals(self, observation: Observation, attributes: dict[str, Any]) -> None:
        intervals = observation.intervals
        assert intervals is not None
        record = self._per_chunk.record
        for interval in intervals:
            record(interval, attributes)
        for _ in range(observation.same_read):
            record(0.0, attributes)
        del intervals[:]
        observation.same_read = 0

    @staticmethod
    def _request_attributes(observation: Observation,
                            request: dict[str, Any] | None) -> dict[str, Any]:
        """The attributes known from the request: operation, provider, model and server."""
        dialect = observation.resolved_dialect()
        url = observation.url
        out: dict[str, Any] = {
            "gen_ai.operation.name": operation_name(dialect, url) if dialect is not None
            else "chat"}
        if dialect is not None:
            out["gen_ai.provider.name"] = dialect.genai_provider
        model = request_model(dialect, url, request)
        if model is not None:
            out["gen_ai.request.model"] = model
        address, port = server_of(url)
        if address is not None:
            out["server.address"] = address
            if port is not None:
                out["server.port"] = port
        return out

    @staticmethod
    def _own(observation: Observation, message: Message) -> dict[str, Any]:
        finish_reason = message.finish_reason
        out: dict[str, Any] = {
            "unbroken.component": observation.component,
            "unbroken.status": message.status.value,
            "unbroken.frames": observation.frames,
            "unbroken.resumes": sum(1 for e in observation.events if e[0] == "unbroken.resume"),
            "unbroken.retries": sum(1 for e in observation.events if e[0] == "unbroken.retry"),
            "unbroken.duplicates": message.duplicates,
            "unbroken.gaps": len(message.gaps),
            "unbroken.stalls": sum(1 for w in message.warnings if w.code == "stall"),
        }
        dialect = observation.resolved_dialect()
        if dialect is not None:
            out["unbroken.dialect"] = dialect.name
        if finish_reason is not None:
            out["unbroken.finish_reason"] = finish_reason.value
        if observation.stream_id is not None:
            out["unbroken.stream_id"] = observation.stream_id
        return out


def _error_type(message: Message) -> str:
    error = message.error
    if isinstance(error, ProviderError) and error.event is not None and error.event.type:
        return error.event.type
    if error is not None:
        return type(error).__name__
    return message.status.value


def _input_messages(observation: Observation, request: dict[str, Any] | None) -> dict[str, str]:
    """``gen_ai.input.messages`` and ``gen_ai.system_instructions`` from the request body, as
    its dialect reads it (``Dialect.genai_input``); none for a body that is no JSON object."""
    dialect = observation.resolved_dialect()
    if dialect is None or request is None:
        return {}
    messages, system = dialect.genai_input(request)
    out = {}
    if messages:
        out["gen_ai.input.messages"] = json.dumps(messages, ensure_ascii=False)
    if system:
        out["gen_ai.system_instructions"] = json.dumps(system, ensure_ascii=False)
    return out


def _output_messages(message: Message) -> str:
    """``gen_ai.output.messages``: the assistant's message in the conventions' JSON shape."""
    parts: list[dict[str, Any]] = []
    if message.reasoning:
        parts.append({"type": "reasoning", "content": message.reasoning})
    if message.text:
        parts.append({"type": "text", "content": message.text})
    for call in message.tool_calls:
        parts.append({"type": "tool_call", "id": call.id, "name": call.name,
                      "arguments": call.value if call.value is not None else call.arguments})
    out: dict[str, Any] = {"role": "assistant", "parts": parts}
    if message.raw_finish_reason:
        out["finish_reason"] = message.raw_finish_reason
    return json.dumps([out], ensure_ascii=False)
