"""Evidence: what arrived, what it meant, and what was committed, frame by frame.

A ``Trace`` belongs to one ``Message``. For every frame it keeps a ``TracedFrame``: seq, block id,
byte length, receive time (passed in; the core reads no clock), the frame's events, whether it
was committed (or why not) and its raw bytes while the raw budget lasts (then metadata only).
``render()`` prints the three columns a person debugging a half sentence reads: raw lines |
parsed delta | committed position, then the verdict and the warnings.

Warnings are ``TraceWarning(code, detail, seq)``; the codes are:

``no_finish_reason``   the stream ended without a finish reason (interrupted)
``no_end_marker``      a finish reason came but the protocol's end marker did not
``end_without_finish`` the end marker came alone (``[DONE]`` is not completion)
``unmapped_reason``    a raw finish reason no table knows (kept as ``other``)
``unterminated_tail``  bytes after the last complete frame at EOF, discarded
``truncated_utf8``     the body ended inside a UTF-8 character
``invalid_utf8``       invalid UTF-8 in the body (with its byte offset)
``error``              the error that closed the stream (decoding, payload, transport …)
``late_error``         an error after the finish reason; the finish reason still decides
``duplicate``          frames with ``seq <= last_seq`` were ignored (counted once, at close)
``gap``                a contiguous seq source skipped numbers: possible loss
``stall``              no frame for longer than the stall threshold
``sequence_error``     an event the message's state does not allow; the frame was not applied
``finish_conflict``    a second, different finish reason (the first one stands)
``second_error``       a second provider error (the first one stands)
``tool_arguments``     a tool call's arguments are not valid JSON
``resumed``            an interrupted message was resumed
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from .events import (
    ErrorEvent,
    Event,
    Finish,
    MessageStart,
    Ping,
    ReasoningDelta,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    Usage,
)

if TYPE_CHECKING:
    from .message import Message

__all__ = ["DEFAULT_RAW_BUDGET", "Trace", "TraceWarning", "TracedFrame"]

DEFAULT_RAW_BUDGET = 2**20

COMMITTED = "committed"
DUPLICATE = "duplicate"
IGNORED = "ignored"  # received, not applied: events the state machine does not allow now
ERROR = "error"


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceWarning:
    code: str
    detail: str
    seq: int | None = None


class TracedFrame(NamedTuple):
    """One frame as received. ``outcome``: committed, duplicate, ignored (not applied: an event the
    message does not allow in its state) or error (the frame could not be parsed).

    ``raw`` is ``None`` once the trace's raw budget is spent (or when the source had no bytes,
    as with an SDK adapter). ``t`` is the receive time the caller passed in, in seconds.
    """

    seq: int
    block_id: str | None
    nbytes: int
    t: float
    events: Sequence[Event]
    outcome: str
    raw: bytes | None

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(type(event).__name__ for event in self.events)

    @property
    def delta(self) -> str:
        """The parsed delta, short: what the frame meant."""
        return "; ".join(describe(event) for event in self.events)


_new_record = tuple.__new__  # bypasses NamedTuple's Python-level __new__ on the per-frame path


class Trace:
    """Per-frame evidence and warnings of one message; empty (no frames) when disabled."""

    __slots__ = ("_message", "_rows", "enabled", "raw_budget", "raw_bytes", "warnings")

    def __init__(
        self,
        *,
        enabled: bool = True,
        raw_budget: int = DEFAULT_RAW_BUDGET,
        warnings: list[TraceWarning] | None = None,
    ) -> None:
        self.enabled = enabled
        self.raw_budget = raw_budget
        self.raw_bytes = 0  # raw bytes kept so far
        self._rows: list[tuple[Any, ...]] = []  # plain tuples: cheapest on the per-frame path
        self.warnings: list[TraceWarning] = warnings if warnings is not None else []
        # A weak reference: the message owns its trace, and no cycle keeps 20k frames alive
        # until the garbage collector runs.
        self._message: Callable[[], Message | None] = _no_message

    def record(
        self,
        seq: int,
        block_id: str | None,
        nbytes: int,
        t: float,
        events: Sequence[Event],
        outcome: str,
        raw: bytes | None,
    ) -> None:
        if raw is not None:
            kept = self.raw_bytes + len(raw)
            if kept > self.raw_budget:
                raw = None
            else:
                self.raw_bytes = kept
        self._rows.append((seq, block_id, nbytes, t, events, outcome, raw))

    @property
    def frames(self) -> list[TracedFrame]:
        """Every frame recorded so far, oldest first."""
        return [_new_record(TracedFrame, row) for row in self._rows]

    def render(self, *, raw_width: int = 60, delta_width: int = 36, max_rows: int = 8) -> str:
        """Three columns (raw lines | parsed delta | committed position), verdict, warnings.

        Raw lines are wrapped to ``raw_width`` display cells (CJK counts two), at most
        ``max_rows`` rows per frame; the delta is one row, clipped.
        """
        lines = [
            f"{_fit('raw lines', raw_width)} | {_fit('parsed delta', delta_width)} | "
            "committed position",
            f"{'-' * raw_width}-+-{'-' * delta_width}-+-{'-' * 30}",
        ]
        offset = 0
        for frame in self.frames:
            offset += frame.nbytes
            position = f"seq {frame.seq} @{offset}B t={frame.t:.3f}s {frame.outcome}"
            rows = [row for line in _raw_lines(frame) for row in _wrap(line, raw_width)]
            if len(rows) > max_rows:
                rows[max_rows - 1 :] = [f"… {len(rows) - max_rows + 1} more rows"]
            delta = _fit(frame.delta, delta_width)
            blank = " " * delta_width
            for i, raw_row in enumerate(rows):
                first = i == 0
                row = (
                    f"{_fit(raw_row, raw_width)} | {delta if first else blank} | "
                    f"{position if first else ''}"
                )
                lines.append(row.rstrip())
        if not self.enabled:
            lines.append("(trace disabled: no frames recorded)")
        lines.append("")
        lines.append(self._verdict())
        if self.warnings:
            lines.append("warnings:")
            for warning in self.warnings:
                at = f" (seq {warning.seq})" if warning.seq is not None else ""
                lines.append(f"  - {warning.code}{at}: {warning.detail}")
        else:
            lines.append("warnings: none")
        return "\n".join(lines) + "\n"

    def _verdict(self) -> str:
        message = self._message()
        if message is None:
            return "verdict: (no message)"
        reason = "none" if message.finish_reason is None else message.finish_reason.value
        raw = "" if message.raw_finish_reason is None else f" (raw {message.raw_finish_reason!r})"
        error = "" if message.error is None else f", error {type(message.error).__name__}: "
        if message.error is not None:
            error += str(message.error)
        return (
            f"verdict: {message.status.value}, finish reason {reason}{raw}, "
            f"last seq {message.last_seq}, duplicates {message.duplicates}, "
            f"gaps {len(message.gaps)}{error}"
        )


def _no_message() -> None:
    return None


def _raw_lines(frame: TracedFrame) -> list[str]:
    if frame.raw is None:
        return [f"({frame.nbytes} bytes, raw not kept)"]
    text = frame.raw.decode("utf-8", "replace")
    found = text.splitlines()
    while found and not found[-1]:
        found.pop()  # the blank line that ends an SSE event says nothing
    return found or [repr(text)]


def _cells(char: str) -> int:
    return 2 if unicodedata.east_asian_width(char) in "WF" else 1


def _fit(text: str, width: int) -> str:
    """Clip (with an ellipsis) or pad ``text`` to exactly ``width`` display cells."""
    total = sum(map(_cells, text))
    if total <= width:
        return text + " " * (width - total)
    used = i = 0
    while used + _cells(text[i]) <= width - 1:  # stops inside the text: it is too wide
        used += _cells(text[i])
        i += 1
    return text[:i] + "…" + " " * (width - 1 - used)


def _wrap(text: str, width: int) -> list[str]:
    """Split ``text`` into rows of at most ``width`` display cells."""
    rows: list[str] = []
    start = used = 0
    for i, char in enumerate(text):
        cells = _cells(char)
        if used + cells > width:
            rows.append(text[start:i])
            start, used = i, 0
        used += cells
    rows.append(text[start:])
    return rows


def describe(event: Event) -> str:
    """A short human reading of one event."""
    if isinstance(event, TextDelta):
        return f"text {event.text!r}"
    if isinstance(event, ReasoningDelta):
        signed = " (signature)" if event.signature else ""
        return f"reasoning {event.text!r}{signed}"
    if isinstance(event, ToolCallDelta):
        head = " ".join(part for part in (event.id, event.name) if part)
        head = f" {head}" if head else ""
        return f"tool[{event.index}]{head} {event.arguments!r}"
    if isinstance(event, Finish):
        return f"finish {event.reason.value} ({event.status.value}, raw {event.raw!r})"
    if isinstance(event, ErrorEvent):
        again = ", retryable" if event.retryable else ""
        return f"error {event.type}: {event.message}{again}"
    if isinstance(event, StreamEnd):
        return f"end {event.marker}"
    if isinstance(event, Usage):
        counts = _usage_counts(event)
        return f"usage {counts}" if counts else "usage"
    if isinstance(event, MessageStart):
        return " ".join(["start", *(part for part in (event.id, event.model) if part)])
    if isinstance(event, Ping):
        return "ping"
    return f"unknown {event.type}"


def _usage_counts(usage: Usage) -> str:
    fields: list[tuple[str, Any]] = [
        ("in", usage.input_tokens),
        ("out", usage.output_tokens),
        ("total", usage.total_tokens),
        ("reasoning", usage.reasoning_tokens),
        ("cached", usage.cached_tokens),
    ]
    return " ".join(f"{name}={value}" for name, value in fields if value is not None)
