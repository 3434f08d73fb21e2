"""Hypothesis drives a Message through random frame orders, duplicates, gaps, ends and resumes.

The model here is written from design.md, not from _transitions.py: a frame commits only if its
seq is above every committed seq; no content after a finish reason, an end marker or an error
(in frame order); nothing after the close; the first finish reason decides the end state unless
a provider error came; without one, a protocol error fails, anything else interrupts, a caller's
stop cancels; only an interrupted message resumes. Invariants: committed text is never lost and
never doubled, ``last_seq`` never moves back, and ``completed`` never comes without a finish
reason. (Model: h2 ``tests/test_state_machines.py``.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from unbroken.errors import LocalProtocolError, PayloadError, StreamError, TransportError
from unbroken.events import (
    ErrorEvent,
    Event,
    Finish,
    MessageStart,
    Ping,
    StreamEnd,
    TextDelta,
    UnknownEvent,
    Usage,
)
from unbroken.finish import END_STATES, FinishReason, Status
from unbroken.message import Message

OUTCOMES = [
    (Status.COMPLETED, FinishReason.STOP, "stop"),
    (Status.COMPLETED, FinishReason.TOOL_CALLS, "tool_calls"),
    (Status.TRUNCATED, FinishReason.LENGTH, "length"),
    (Status.FILTERED, FinishReason.CONTENT_FILTER, "content_filter"),
    (Status.COMPLETED, FinishReason.OTHER, "mystery"),
    (Status.FAILED, FinishReason.ERROR, "MALFORMED_FUNCTION_CALL"),
]


@dataclass
class Frame:
    seq: int
    events: list[Event] = field(default_factory=list)


def event_of(kind: str, seq: int, text: str, outcome: int) -> Event:
    if kind == "text":
        return TextDelta(seq=seq, text=text)
    if kind == "finish":
        status, reason, raw = OUTCOMES[outcome]
        return Finish(seq=seq, status=status, reason=reason, raw=raw)
    if kind == "end":
        return StreamEnd(seq=seq, marker="[DONE]")
    if kind == "error":
        return ErrorEvent(seq=seq, type="overloaded_error", message="busy", retryable=True)
    if kind == "usage":
        return Usage(seq=seq, output_tokens=len(text))
    if kind == "start":
        return MessageStart(seq=seq, id="msg", model="m")
    if kind == "ping":
        return Ping(seq=seq)
    return UnknownEvent(seq=seq, type="x")


KINDS = st.sampled_from(
    ["text", "text", "text", "finish", "end", "error", "usage", "start", "ping", "unknown"]
)
SPECS = st.lists(
    st.tuples(KINDS, st.text(max_size=4), st.integers(0, len(OUTCOMES) - 1)),
    min_size=0,
    max_size=3,
)


class MessageMachine(RuleBasedStateMachine):
    held = Bundle("held")

    def __init__(self) -> None:
        super().__init__()
        self.message = Message()
        self.next_seq = 0
        self.sent: list[Frame] = []
        # the model
        self.text = ""
        self.last_seq = -1
        self.finish: Finish | None = None
        self.blocked = False  # a finish reason, an end marker or an error came
        self.errored = False
        self.closed = False
        self.status = Status.PENDING

    @initialize(trace=st.booleans(), source=st.sampled_from([None, "proxy", "block_id"]))
    def configure(self, trace: bool, source: str | None) -> None:
        self.message = Message(trace=trace, seq_source=source)

    def make(self, specs: list[tuple[str, str, int]]) -> Frame:
        seq = self.next_seq
        self.next_seq += 1
        return Frame(seq, [event_of(kind, seq, text, outcome) for kind, text, outcome in specs])

    def deliver(self, frame: Frame) -> None:
        accepted = not self.closed and frame.seq > self.last_seq
        blocked = self.blocked
        for event in frame.events:
            if isinstance(event, TextDelta) and blocked:
                accepted = False
            if isinstance(event, Finish | StreamEnd | ErrorEvent):
                blocked = True
        before = (self.message.text, self.message.last_seq)
        assert self.message.commit(frame.seq, frame.events) is accepted
        self.sent.append(frame)
        if not accepted:
            assert (self.message.text, self.message.last_seq) == before
            return
        self.last_seq = frame.seq
        self.blocked = blocked
        for event in frame.events:
            if isinstance(event, TextDelta):
                self.text += event.text
            elif isinstance(event, Finish) and self.finish is None:
                self.finish = event
            elif isinstance(event, ErrorEvent):
                self.errored = True

    @rule(specs=SPECS)
    def send(self, specs: list[tuple[str, str, int]]) -> None:
        self.deliver(self.make(specs))

    @rule(target=held, specs=SPECS)
    def hold(self, specs: list[tuple[str, str, int]]) -> Frame:
        """A frame that takes a slower path: numbered now, delivered later (out of order)."""
        return self.make(specs)

    @rule(frame=held)
    def deliver_late(self, frame: Frame) -> None:
        self.deliver(frame)

    @rule(data=st.data())
    def resend(self, data: st.DataObject) -> None:
        if self.sent:
            self.deliver(data.draw(st.sampled_from(self.sent)))

    @rule(skip=st.integers(1, 5))
    def lose_frames(self, skip: int) -> None:
        self.next_seq += skip

    @rule(how=st.sampled_from(["eof", "transport", "protocol", "cancel"]))
    def close(self, how: str) -> None:
        error: StreamError | None = None
        if how == "transport":
            error = TransportError("reset")
        elif how == "protocol":
            error = PayloadError("junk")
        status = self.message.close(error, cancelled=how == "cancel")
        if not self.closed:
            if self.errored:
                self.status = Status.FAILED
            elif self.finish is not None:
                self.status = self.finish.status
            elif how == "cancel":
                self.status = Status.CANCELLED
            elif how == "protocol":
                self.status = Status.FAILED
            else:
                self.status = Status.INTERRUPTED
            self.closed = True
        assert status is self.status

    @rule()
    def resume(self) -> None:
        if self.closed and self.status is Status.INTERRUPTED:
            self.message.resume()
            self.closed = False
            self.blocked = False  # an end marker without a finish reason is forgotten
            self.status = Status.STREAMING
        else:
            try:
                self.message.resume()
            except LocalProtocolError:
                pass
            else:
                raise AssertionError("resumed a message that was not interrupted")

    @invariant()
    def text_is_never_lost_or_doubled(self) -> None:
        assert self.message.text == self.text

    @invariant()
    def last_seq_is_the_highest_committed(self) -> None:
        assert self.message.last_seq == self.last_seq

    @invariant()
    def the_verdict_matches(self) -> None:
        status = self.message.status
        if self.closed:
            assert status is self.status
            assert status in END_STATES
        else:
            assert status in (Status.PENDING, Status.STREAMING)
        if status is Status.COMPLETED:
            assert self.message.finish_reason is not None
        assert self.message.finish is self.finish


MessageMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
TestMessageMachine = MessageMachine.TestCase
