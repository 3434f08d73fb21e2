"""The message state machine: one table, and nothing else decides a transition.

A ``Message`` is in one ``Phase``. Each committed event and each end-of-stream ``Signal`` is
looked up in ``TRANSITIONS`` under ``(phase, input)``; the value is the next phase. A missing
key means the input is not allowed in that phase: for an event that is a ``SequenceError``
recorded in the trace (the frame is not applied), for ``Signal.RESUME`` a ``LocalProtocolError``.

Phases are finer than ``Status`` because the end state is decided later than the events that
decide it: after a finish reason the stream may still carry usage and the end marker, so
``FINISHED`` waits for the close, and ``DECIDED`` means "closed; the ``Finish`` event's status is
the status". ``STATUS_OF_PHASE`` maps every other phase to the status a caller sees.

Rules the table encodes:

- a finish reason decides the end state, with or without the end marker, even when the body
  later breaks or the caller stops reading;
- the end marker alone (``[DONE]``, ``message_stop``) is not completion: closing then is
  ``interrupted``;
- an error event fails the message whatever follows;
- no content after a finish reason, an end marker or an error; nothing at all after the close;
- ``interrupted`` is the only end state a resume leaves (back to ``streaming``).
"""

from __future__ import annotations

from enum import Enum

from .events import (
    ErrorEvent,
    Finish,
    MessageStart,
    Ping,
    ReasoningDelta,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    UnknownEvent,
    Usage,
)
from .finish import Status

__all__ = [
    "MOVES",
    "STATUS_OF_PHASE",
    "TERMINAL",
    "TRANSITIONS",
    "Phase",
    "ProvisionalFinish",
    "Signal",
]


class Phase(Enum):
    PENDING = "pending"  # nothing visible yet (a start, pings or usage may have come)
    STREAMING = "streaming"  # content is arriving
    FINISHED = "finished"  # a finish reason came; the end marker has not
    PROVISIONAL = "provisional"  # a finish reason came that more content may supersede
    DONE = "done"  # finish reason and end marker both came
    ENDED = "ended"  # the end marker came without a finish reason
    ERRORED = "errored"  # the provider reported an error in the stream
    DECIDED = "decided"  # closed; the Finish event's status is the status
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Signal(Enum):
    """Inputs that are not events: how the stream ended, or a resume."""

    EOF = "eof"  # the body ended cleanly
    BROKEN = "broken"  # transport broke or a deadline passed
    INVALID = "invalid"  # a protocol error in the bytes, or a provider error
    CANCEL = "cancel"  # the caller stopped reading
    RESUME = "resume"  # a resume continues an interrupted stream


class ProvisionalFinish:
    """The table's key for a ``Finish`` with ``final=False`` (never instantiated)."""


CONTENT = (TextDelta, ReasoningDelta, ToolCallDelta)
QUIET = (MessageStart, Usage, Ping, UnknownEvent)  # allowed wherever the stream is still open


def _open(phase: Phase, *, content: Phase | None, finish: Phase, end: Phase) -> dict[object, Phase]:
    """The rows shared by every open phase; ``content=None`` forbids content deltas."""
    row: dict[object, Phase] = dict.fromkeys(QUIET, phase)
    if content is not None:
        row.update(dict.fromkeys(CONTENT, content))
    row[Finish] = finish
    # A provisional finish only holds while content may still come; after a final finish or
    # the end marker it is one more finish reason (the first final one stands).
    open_to_content = phase in (Phase.PENDING, Phase.STREAMING, Phase.PROVISIONAL)
    row[ProvisionalFinish] = Phase.PROVISIONAL if open_to_content else finish
    row[StreamEnd] = end
    row[ErrorEvent] = Phase.ERRORED
    return row


_P = Phase
_ROWS: dict[Phase, dict[object, Phase]] = {
    _P.PENDING: {
        **_open(_P.PENDING, content=_P.STREAMING, finish=_P.FINISHED, end=_P.ENDED),
        Signal.EOF: _P.INTERRUPTED,
        Signal.BROKEN: _P.INTERRUPTED,
        Signal.INVALID: _P.FAILED,
        Signal.CANCEL: _P.CANCELLED,
    },
    _P.STREAMING: {
        **_open(_P.STREAMING, content=_P.STREAMING, finish=_P.FINISHED, end=_P.ENDED),
        Signal.EOF: _P.INTERRUPTED,
        Signal.BROKEN: _P.INTERRUPTED,
        Signal.INVALID: _P.FAILED,
        Signal.CANCEL: _P.CANCELLED,
    },
    # Content after a provisional finish supersedes it (the message forgets that finish).
    _P.PROVISIONAL: {
        **_open(_P.PROVISIONAL, content=_P.STREAMING, finish=_P.FINISHED, end=_P.DONE),
        Signal.EOF: _P.DECIDED,
        Signal.BROKEN: _P.DECIDED,
        Signal.INVALID: _P.DECIDED,
        Signal.CANCEL: _P.DECIDED,
    },
    _P.FINISHED: {
        **_open(_P.FINISHED, content=None, finish=_P.FINISHED, end=_P.DONE),
        Signal.EOF: _P.DECIDED,
        Signal.BROKEN: _P.DECIDED,
        Signal.INVALID: _P.DECIDED,
        Signal.CANCEL: _P.DECIDED,
    },
    _P.DONE: {
        **_open(_P.DONE, content=None, finish=_P.DONE, end=_P.DONE),
        Signal.EOF: _P.DECIDED,
        Signal.BROKEN: _P.DECIDED,
        Signal.INVALID: _P.DECIDED,
        Signal.CANCEL: _P.DECIDED,
    },
    _P.ENDED: {
        **_open(_P.ENDED, content=None, finish=_P.DONE, end=_P.ENDED),
        Signal.EOF: _P.INTERRUPTED,
        Signal.BROKEN: _P.INTERRUPTED,
        Signal.INVALID: _P.FAILED,
        Signal.CANCEL: _P.CANCELLED,
    },
    _P.ERRORED: {
        **_open(_P.ERRORED, content=None, finish=_P.ERRORED, end=_P.ERRORED),
        Signal.EOF: _P.FAILED,
        Signal.BROKEN: _P.FAILED,
        Signal.INVALID: _P.FAILED,
        Signal.CANCEL: _P.FAILED,
    },
    # End states: no events; a second close changes nothing; only INTERRUPTED resumes.
    _P.DECIDED: dict.fromkeys(
        (Signal.EOF, Signal.BROKEN, Signal.INVALID, Signal.CANCEL), _P.DECIDED
    ),
    _P.INTERRUPTED: {
        **dict.fromkeys((Signal.EOF, Signal.BROKEN, Signal.INVALID, Signal.CANCEL), _P.INTERRUPTED),
        Signal.RESUME: _P.STREAMING,
    },
    _P.FAILED: dict.fromkeys((Signal.EOF, Signal.BROKEN, Signal.INVALID, Signal.CANCEL), _P.FAILED),
    _P.CANCELLED: dict.fromkeys(
        (Signal.EOF, Signal.BROKEN, Signal.INVALID, Signal.CANCEL), _P.CANCELLED
    ),
}

TRANSITIONS: dict[tuple[Phase, object], Phase] = {
    (phase, key): target for phase, row in _ROWS.items() for key, target in row.items()
}
"""``(phase, event class or Signal) -> next phase``: the whole state machine."""

# The same table indexed by phase first: the per-frame path does one dict lookup keyed by the
# event's class (identity hash), never a tuple of enums (Enum.__hash__ runs Python code).
MOVES: dict[Phase, dict[object, Phase]] = {phase: {} for phase in Phase}
for (_phase, _key), _target in TRANSITIONS.items():
    MOVES[_phase][_key] = _target

TERMINAL = frozenset({Phase.DECIDED, Phase.INTERRUPTED, Phase.FAILED, Phase.CANCELLED})

STATUS_OF_PHASE: dict[Phase, Status] = {
    Phase.PENDING: Status.PENDING,
    Phase.STREAMING: Status.STREAMING,
    Phase.FINISHED: Status.STREAMING,
    Phase.PROVISIONAL: Status.STREAMING,
    Phase.DONE: Status.STREAMING,
    Phase.ENDED: Status.STREAMING,
    Phase.ERRORED: Status.STREAMING,
    Phase.INTERRUPTED: Status.INTERRUPTED,
    Phase.FAILED: Status.FAILED,
    Phase.CANCELLED: Status.CANCELLED,
    # DECIDED is absent on purpose: its status is the Finish event's.
}
