"""``Message``: commits whole frames of normalized events and decides how the stream ended.

Buffer, then parse, then commit: a frame's events reach the message only after the frame was cut
and parsed whole, and they are applied together or not at all. ``commit(seq, events)`` applies a
frame only if ``seq > last_seq`` (duplicates are counted, never appended; ``last_seq`` never moves
back). Which events are allowed, and which state follows, is decided by the table in
``_transitions.py`` and nowhere else; an event it does not allow is a ``SequenceError`` recorded in
the trace, and the frame is left out so the message is not corrupted.

Text and tool-call arguments are kept as lists of parts and joined on access, so receiving is
linear in the body; ``ToolCall.value`` is parsed once, when the finish reason or the close comes
(``_tool_calls.py`` assembles the calls).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

from ._tool_calls import ToolCall, ToolCalls, joined
from ._transitions import MOVES, STATUS_OF_PHASE, TERMINAL, Phase, ProvisionalFinish, Signal
from .errors import (
    DecodingError,
    LocalProtocolError,
    ProtocolError,
    ProviderError,
    SequenceError,
    StreamError,
)
from .events import (
    ErrorEvent,
    Event,
    Finish,
    MessageStart,
    ReasoningDelta,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from .finish import FinishReason, Status
from .trace import COMMITTED, DEFAULT_RAW_BUDGET, DUPLICATE, IGNORED, Trace, TraceWarning

__all__ = ["CONTIGUOUS_SOURCES", "Message", "ToolCall"]

# Seq sources numbered without gaps (a proxy's n, the provider's own number, the position); a
# skipped number there is loss. A numeric block id may skip.
CONTIGUOUS_SOURCES = frozenset({"proxy", "provider", "position"})


class _Unkept(list[str]):
    """The text of a message made with ``keep_text=False``: every delta appended is dropped."""

    __slots__ = ()

    def append(self, item: str, /) -> None:
        return None


_UNKEPT = _Unkept()


class Message:
    """The state of one streamed assistant message: status, finish reason (normalized and raw),
    text, reasoning, tool calls, usage, the error that ended it, ``last_seq`` and the trace."""

    def __init__(
        self,
        *,
        trace: bool = True,
        raw_budget: int = DEFAULT_RAW_BUDGET,
        seq_source: str | None = None,
        expect_end_marker: bool = True,
        keep_text: bool = True,
    ) -> None:
        """``keep_text=False``: the text deltas are applied (phases, finish) but not kept, for
        a reader that stores them elsewhere (the proxy journals each frame's text): a live
        stream then holds no copy of its text; ``text`` raises."""
        self.last_seq = -1
        self.id: str | None = None
        self.model: str | None = None
        self.usage: Usage | None = None
        self.error: StreamError | None = None
        self.finish: Finish | None = None
        self.end_marker: str | None = None
        self.reasoning_signature: str | None = None
        self.duplicates = 0
        # Generations started for this message, this one included: a client's fresh attempt
        # after the provider had answered starts another (``Retry.after_response``); the ids
        # the earlier ones answered with (``None`` where none came) are kept as evidence.
        self.generations = 1
        self.earlier_response_ids: list[str | None] = []
        self.gaps: list[tuple[int, int]] = []
        self.sequence_errors: list[SequenceError] = []
        self.warnings: list[TraceWarning] = []
        self.trace = Trace(enabled=trace, raw_budget=raw_budget, warnings=self.warnings)
        self.trace._message = weakref.ref(self)
        # How frames are numbered, set by whoever fixes it (the receiver, from the first frame);
        # held here only, since the gap check needs it.
        self.seq_source = seq_source
        # Gemini and the Responses API have no end marker: no warning for its absence.
        self.expect_end_marker = expect_end_marker
        self._phase = Phase.PENDING
        self._moves = MOVES[Phase.PENDING]
        self._seen_seq = -1  # highest seq offered (committed or rejected), for gap detection
        self._text: list[str] = [] if keep_text else _UNKEPT
        self._reasoning: list[str] = []
        self._calls = ToolCalls()

    # -- what a caller reads ------------------------------------------------------------------

    @property
    def status(self) -> Status:
        if self._phase is Phase.DECIDED and self.finish is not None:
            return self.finish.status
        return STATUS_OF_PHASE[self._phase]

    @property
    def closed(self) -> bool:
        return self._phase in TERMINAL

    @property
    def finish_reason(self) -> FinishReason | None:
        """Normalized; ``error`` when the provider reported an error in the stream."""
        if self._provider_failed():
            return FinishReason.ERROR
        return None if self.finish is None else self.finish.reason

    @property
    def raw_finish_reason(self) -> str | None:
        """The provider's own string; for an error in the stream, its error type."""
        error = self.error
        if self._provider_failed() and isinstance(error, ProviderError):
            return self.finish.raw if self.finish is not None and self.finish.status is \
                Status.FAILED else error.event.type
        return None if self.finish is None else self.finish.raw

    def _provider_failed(self) -> bool:
        # An error event fails the message whatever finish reason came before it.
        return self._phase in (Phase.ERRORED, Phase.FAILED) and isinstance(
            self.error, ProviderError
        )

    @property
    def text(self) -> str:
        if self._text is _UNKEPT:
            raise RuntimeError("this message keeps no text (Message(keep_text=False))")
        return joined(self._text)

    @property
    def reasoning(self) -> str:
        return joined(self._reasoning)

    @property
    def tool_calls(self) -> list[ToolCall]:
        return self._calls.calls()

    # -- receiving ----------------------------------------------------------------------------

    def commit(
        self,
        seq: int,
        events: Sequence[Event],
        t: float = 0.0,
        nbytes: int = 0,
        block_id: str | None = None,
        raw: bytes | None = None,
    ) -> bool:
        """Apply one frame's events if ``seq > last_seq``; return whether it was committed."""
        if seq <= self.last_seq:
            self.duplicates += 1
            if self.trace.enabled:
                self.trace.record(seq, block_id, nbytes, t, events, DUPLICATE, raw)
            return False
        if seq != self._seen_seq + 1:
            self._check_gap(seq)
        if len(events) == 1:  # the common frame: one event, checked and applied in one step
            event = events[0]
            cls = event.__class__
            target = self._moves.get(
                ProvisionalFinish if cls is Finish and not event.final else cls  # type: ignore[union-attr]
            )
            if target is None:
                return self._reject(
                    seq, cls.__name__, self._phase, events, t, nbytes, block_id, raw
                )
            if cls is TextDelta:
                self._text.append(event.text)  # type: ignore[union-attr]
            else:
                self._apply(event)
            if target is not self._phase:
                if self._phase is Phase.PROVISIONAL and target is Phase.STREAMING:
                    self.finish = None  # content came after all: that finish was not the end
                self._phase = target
                self._moves = MOVES[target]
        else:
            phase = self._phase
            moves = self._moves
            for event in events:  # check the whole frame before applying any of it
                cls = event.__class__
                target = moves.get(
                    ProvisionalFinish if cls is Finish and not event.final else cls  # type: ignore[union-attr]
                )
                if target is None:
                    name = type(event).__name__
                    return self._reject(seq, name, phase, events, t, nbytes, block_id, raw)
                if target is not phase:
                    phase = target
                    moves = MOVES[target]
            if not events and phase in TERMINAL:  # even an empty frame may not follow the close
                return self._reject(seq, "empty frame", phase, events, t, nbytes, block_id, raw)
            if self._phase is Phase.PROVISIONAL and phase is Phase.STREAMING:
                self.finish = None
            for event in events:
                self._apply(event)
            self._phase = phase
            self._moves = moves
        self.last_seq = self._seen_seq = seq
        if self.trace.enabled:
            self.trace.record(seq, block_id, nbytes, t, events, COMMITTED, raw)
        return True

    def close(self, error: StreamError | None = None, *, cancelled: bool = False) -> Status:
        """End the message and decide its status; closing an ended message changes nothing.

        ``error`` is what ended the stream badly: a ``ProtocolError`` or ``ProviderError``
        fails it, any other ``StreamError`` (transport, timeout) interrupts it, unless a finish
        reason already came, which decides. ``cancelled`` means the caller stopped reading.
        """
        before = self._phase
        if cancelled:
            signal = Signal.CANCEL
        elif error is None:
            signal = Signal.EOF
        elif isinstance(error, ProtocolError | ProviderError):
            signal = Signal.INVALID
        else:
            signal = Signal.BROKEN
        after = MOVES[before][signal]
        if before in TERMINAL:
            return self.status
        self._phase = after
        self._moves = MOVES[after]
        self._complete_tool_calls()
        if after is Phase.DECIDED:
            self._close_decided(before, error)
        elif after is Phase.FAILED and before is Phase.ERRORED:
            if error is not None:
                self._warn(_error_code(error), _describe_error(error))
        else:
            if error is not None:
                self.error = error
                self._warn(_error_code(error), _describe_error(error))
            if after is Phase.INTERRUPTED:
                if before is Phase.ENDED:
                    self._warn(
                        "end_without_finish",
                        f"end marker {self.end_marker!r} came without a finish reason",
                    )
                self._warn("no_finish_reason", "the stream ended without a finish reason")
        if self.duplicates:
            self._warn("duplicate", f"{self.duplicates} frame(s) with seq <= last_seq ignored")
        return self.status

    def resume(self) -> None:
        """Continue an interrupted message (a resume reconnected): back to ``streaming``."""
        target = MOVES[self._phase].get(Signal.RESUME)
        if target is None:
            raise LocalProtocolError(f"cannot resume a {self.status.value} message")
        self._phase = target
        self._moves = MOVES[target]
        self.error = None
        self._warn("resumed", f"resumed after seq {self.last_seq}")

    def warn(self, code: str, detail: str, seq: int | None = None) -> None:
        """Record a warning found outside the message (the receiver's tail, stalls, …)."""
        self._warn(code, detail, seq)

    # -- applying one event -------------------------------------------------------------------

    def _warn(self, code: str, detail: str, seq: int | None = None) -> None:
        self.warnings.append(TraceWarning(code=code, detail=detail, seq=seq))

    def _apply(self, event: Event) -> None:
        cls = event.__class__
        if cls is TextDelta:
            self._text.append(event.text)  # type: ignore[union-attr]
        elif cls is ReasoningDelta:
            self._reasoning_delta(event)  # type: ignore[arg-type]
        elif cls is ToolCallDelta:
            reused = self._calls.add(event)  # type: ignore[arg-type]
            if reused is not None:
                self._warn("tool_index_reused", reused, event.seq)
        elif cls is Usage:
            self._usage(event)  # type: ignore[arg-type]
        elif cls is Finish:
            self._finish(event)  # type: ignore[arg-type]
        elif cls is ErrorEvent:
            self._error_event(event)  # type: ignore[arg-type]
        elif cls is StreamEnd:
            self.end_marker = event.marker  # type: ignore[union-attr]
        elif cls is MessageStart:
            self._start(event)  # type: ignore[arg-type]
        # Ping and UnknownEvent change nothing but the trace.

    def _check_gap(self, seq: int) -> None:
        seen = self._seen_seq
        if seq > seen + 1 and seen >= 0 and self.seq_source in CONTIGUOUS_SOURCES:
            self.gaps.append((seen, seq))
            self._warn("gap", f"frames {seen + 1}..{seq - 1} never arrived", seq)

    def _reject(
        self,
        seq: int,
        kind: str,
        phase: Phase,
        events: Sequence[Event],
        t: float,
        nbytes: int,
        block_id: str | None,
        raw: bytes | None,
    ) -> bool:
        state = self.status.value if phase in TERMINAL else phase.value
        problem = SequenceError(
            f"{kind} not allowed when the message is {state}; frame {seq} not applied",
            state=state,
            kind=kind,
            seq=seq,
        )
        self.sequence_errors.append(problem)
        self._seen_seq = max(self._seen_seq, seq)
        self._warn("sequence_error", str(problem), seq)
        if self.trace.enabled:
            self.trace.record(seq, block_id, nbytes, t, events, IGNORED, raw)
        return False

    def _reasoning_delta(self, event: ReasoningDelta) -> None:
        if event.text:
            self._reasoning.append(event.text)
        if event.signature is not None:
            self.reasoning_signature = event.signature

    def _usage(self, event: Usage) -> None:
        old = self.usage
        if old is None:
            self.usage = event
            return
        # Providers report cumulative counts: a later report replaces field by field.
        self.usage = Usage(
            seq=event.seq,
            input_tokens=_latest(event.input_tokens, old.input_tokens),
            output_tokens=_latest(event.output_tokens, old.output_tokens),
            total_tokens=_latest(event.total_tokens, old.total_tokens),
            reasoning_tokens=_latest(event.reasoning_tokens, old.reasoning_tokens),
            cached_tokens=_latest(event.cached_tokens, old.cached_tokens),
        )

    def _finish(self, event: Finish) -> None:
        if self.finish is None or not self.finish.final:  # a provisional one is superseded
            self.finish = event
            if event.reason is FinishReason.OTHER:
                self._warn(
                    "unmapped_reason", f"finish reason {event.raw!r} kept as 'other'", event.seq
                )
            self._complete_tool_calls()
        elif (event.status, event.reason, event.raw) != (
            self.finish.status,
            self.finish.reason,
            self.finish.raw,
        ):
            self._warn(
                "finish_conflict",
                f"finish reason {event.raw!r} after {self.finish.raw!r}; the first stands",
                event.seq,
            )

    def _error_event(self, event: ErrorEvent) -> None:
        if isinstance(self.error, ProviderError):
            self._warn("second_error", f"{event.type}: {event.message}", event.seq)
            return
        self.error = ProviderError(event)

    def _start(self, event: MessageStart) -> None:
        if self.id is None:
            self.id = event.id
        if self.model is None:
            self.model = event.model

    # -- closing ------------------------------------------------------------------------------

    def _close_decided(self, before: Phase, error: StreamError | None) -> None:
        finish = self.finish
        assert finish is not None  # the table reaches DECIDED only from FINISHED or DONE
        if error is not None:
            self._warn("late_error", f"after the finish reason: {_describe_error(error)}")
        if before is Phase.FINISHED and self.expect_end_marker:
            self._warn("no_end_marker", f"finish reason {finish.raw!r} came without the end marker")
        if finish.status is Status.FAILED and self.error is None:
            self.error = ProviderError(
                ErrorEvent(
                    seq=finish.seq,
                    type=finish.raw,
                    message=f"the provider ended with finish reason {finish.raw!r}",
                    retryable=False,
                )
            )

    def _complete_tool_calls(self) -> None:
        for problem in self._calls.complete():
            self._warn("tool_arguments", problem)


def _latest(new: int | None, old: int | None) -> int | None:
    return old if new is None else new


def _error_code(error: StreamError) -> str:
    return "invalid_utf8" if isinstance(error, DecodingError) else "error"


def _describe_error(error: StreamError) -> str:
    if isinstance(error, DecodingError):
        return f"invalid UTF-8 at byte offset {error.offset}"
    return f"{type(error).__name__}: {error}"
