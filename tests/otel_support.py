"""OpenTelemetry's SDK with in-memory exporters, and ``unbroken.telemetry`` pointed at it.

``recording()`` instruments unbroken with a fresh tracer and meter provider for one test and
undoes it after; ``Recorded.spans()`` are the finished spans, ``Recorded.points(name)`` the data
points of one metric (each a histogram point: count, sum, attributes).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from unbroken import telemetry

__all__ = ["Recorded", "recording"]


@dataclass
class Recorded:
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    def spans(self, component: str | None = None) -> list[ReadableSpan]:
        return [span for span in self.exporter.get_finished_spans()
                if component is None or (span.attributes or {}).get("unbroken.component")
                == component]

    def points(self, name: str) -> list[HistogramDataPoint]:
        data = self.reader.get_metrics_data()
        found: list[HistogramDataPoint] = []
        if data is None:
            return found
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found += [p for p in metric.data.data_points
                                  if isinstance(p, HistogramDataPoint)]
        return found


@contextmanager
def recording(**options: Any) -> Iterator[Recorded]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider,
                         **options)
    try:
        yield Recorded(exporter, reader)
    finally:
        telemetry.uninstrument()
        tracer_provider.shutdown()
        meter_provider.shutdown()
