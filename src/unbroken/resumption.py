"""Resumption: where a stream continues after a cut, and who decides that.

Everything the proxy, the client and the receiver must agree on to resume a stream lives here,
once: the event id ``<stream_id>:<seq>`` (``event_id`` builds it, ``parse_event_id`` reads it),
the header names, the mark an unbroken proxy puts on the frames it writes itself, and the
client's decision after a failed attempt (``DECISIONS``). Sans-I/O: the standard library and
the core's errors only, no clock.

The proxy's own frames. When a stream or a response ends without its upstream finishing it,
the proxy writes one last frame in the dialect's error shape (so that the official SDKs raise
instead of ending quietly on half a sentence) carrying a ``ProxyMark``: the proxy's code, the
stream's journaled status, and whether a reconnect with ``Last-Event-ID`` reads on. A frame it
journaled has an id like any other (an upstream that broke, a proxy that shut down or lost its
lease); a notice that only this response ends early has none and is not part of the stream
(``stream_incomplete``, a background stream its owner's resume re-attaches). Where the mark sits
in each provider's error shape is the dialect's business (``Dialect.proxy_error`` and
``Dialect.proxy_mark_fields``); what it says is this module's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from .errors import PayloadError, ProxyInterrupted, StreamError

__all__ = [
    "DECISIONS",
    "IDEMPOTENCY_KEY",
    "LAST_EVENT_ID",
    "MAX_SEQ",
    "PROXY_DOMAIN",
    "PROXY_MESSAGE_PREFIX",
    "STREAM_ID_HEADER",
    "STREAM_TOKEN_HEADER",
    "Decision",
    "Failure",
    "ProxyMark",
    "ResumeTarget",
    "Shown",
    "decide",
    "event_id",
    "event_id_prefix",
    "parse_event_id",
    "proxy_end_error",
    "proxy_error",
    "proxy_mark",
    "seq_of",
    "valid_seq",
]

# -- headers ------------------------------------------------------------------------------------

LAST_EVENT_ID: Final = "Last-Event-ID"
STREAM_ID_HEADER: Final = "Unbroken-Stream-Id"
STREAM_TOKEN_HEADER: Final = "Unbroken-Stream-Token"
IDEMPOTENCY_KEY: Final = "Idempotency-Key"

# -- the event id -------------------------------------------------------------------------------

# A seq is stored as a signed 64-bit integer (SQLite INTEGER, Redis stream ids): a larger number
# is not one of ours, whatever its digits (it used to reach the SQLite query and raise
# OverflowError).
MAX_SEQ: Final = 2**63 - 1


def event_id(stream_id: str, seq: int) -> str:
    """The SSE id of frame ``seq`` of an unbroken stream: ``<stream_id>:<seq>``."""
    return event_id_prefix(stream_id) + str(seq)


def event_id_prefix(stream_id: str) -> str:
    """What every event id of ``stream_id`` starts with (a writer appends the seq's digits)."""
    return stream_id + ":"


def valid_seq(text: str) -> bool:
    """Whether ``text`` is a seq as an unbroken proxy writes it: ASCII digits, at most
    ``MAX_SEQ``."""
    return text.isascii() and seq_of(text.encode("ascii")) is not None


def seq_of(digits: bytes) -> int | None:
    """The seq ``digits`` write if they are one as an unbroken proxy writes it (``valid_seq``),
    else ``None``."""
    if digits.isdigit() and len(digits) <= 19:  # (bytes.isdigit: ASCII digits only)
        seq = int(digits)
        if seq <= MAX_SEQ:
            return seq
    return None


def parse_event_id(value: str | None) -> tuple[str, int] | None:
    """``(stream_id, seq)`` of an unbroken event id, else ``None``: the part after the last
    colon must be a ``valid_seq``, the part before it not empty. Surrounding whitespace is
    ignored (a header value)."""
    if not value:
        return None
    stream_id, colon, seq = value.strip().rpartition(":")
    if not colon or not stream_id or not valid_seq(seq):
        return None
    return stream_id, int(seq)


# -- the proxy's own frames ---------------------------------------------------------------------

PROXY_DOMAIN: Final = "unbroken"
"""The name the mark goes by in every dialect (Gemini: the ``google.rpc.ErrorInfo`` domain)."""

PROXY_MESSAGE_PREFIX: Final = "unbroken proxy: "
"""How every message the proxy writes itself begins, for a person reading it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProxyMark:
    """What an unbroken proxy says in a frame it wrote itself.

    ``code``: why (``upstream_interrupted``, ``proxy_shutdown``, ``proxy_restarted``,
    ``stream_cancelled``, ``upstream_malformed``, ``stream_incomplete``). ``status``: the
    stream's status in the proxy's journal when the frame was written (``interrupted``,
    ``cancelled``, ``failed``; ``streaming`` when only this response ended; ``unknown`` when the
    journal no longer has the stream). ``resumable``: a reconnect with ``Last-Event-ID`` reads
    on (the frame is a notice, not a frame of the stream).
    """

    code: str
    status: str
    resumable: bool
    message: str = ""  # for people; the dialect's own message slot carries it

    def fields(self) -> dict[str, str]:
        """The mark as strings (Gemini's ``ErrorInfo.metadata`` holds only strings); the
        message travels apart, in the error's own message."""
        return {"code": self.code, "status": self.status,
                "resumable": "true" if self.resumable else "false"}

    @classmethod
    def from_fields(cls, fields: Any) -> ProxyMark | None:
        """The mark of ``fields`` as ``fields()`` wrote them (plus an optional ``message``);
        ``None`` for anything else."""
        if fields.__class__ is not dict:
            return None
        code, status, resumable, message = (
            fields.get(key) for key in ("code", "status", "resumable", "message"))
        if (code.__class__ is not str or status.__class__ is not str
                or resumable not in ("true", "false")):
            return None
        return cls(code=code, status=status, resumable=resumable == "true",
                   message=message if message.__class__ is str else "")


def proxy_error(dialect: Any, mark: ProxyMark,
                provider_seq: int | None = None) -> tuple[str | None, dict[str, Any]]:
    """The SSE event name (or ``None``) and payload of the proxy's own frame in ``dialect``'s
    error shape, with ``mark.message`` (which starts with ``PROXY_MESSAGE_PREFIX``) as the
    error's message; ``provider_seq`` continues a provider's own numbering (Responses)."""
    shaped: tuple[str | None, dict[str, Any]] = dialect.proxy_error(
        PROXY_DOMAIN, mark.fields(), mark.message, provider_seq)
    return shaped


def proxy_mark(dialect: Any, payload: Any) -> ProxyMark | None:
    """The mark of a payload the proxy wrote itself, or ``None`` (a provider's own frame)."""
    fields: Mapping[str, str] | None = dialect.proxy_mark_fields(payload, PROXY_DOMAIN)
    return None if fields is None else ProxyMark.from_fields(fields)


def proxy_end_error(mark: ProxyMark) -> StreamError | None:
    """What ends a message at the proxy's own frame, so that it ends with the status the proxy
    journaled: ``ProxyInterrupted`` (interrupted, or a response that ended early), a
    ``PayloadError`` for ``failed`` (the proxy could not read its upstream's bytes), ``None``
    for ``cancelled`` (the caller closes the message cancelled)."""
    if mark.status == "cancelled":
        return None
    if mark.status == "failed":
        return PayloadError(mark.message)
    return ProxyInterrupted(mark.message, code=mark.code, status=mark.status)


# -- the client's decision after a failed attempt -----------------------------------------------


class Failure(Enum):
    """What ended the attempt."""

    BROKEN = "broken"  # transport, deadline, 429/5xx, a body cut short (a proxy notice too)
    PROVIDER_ERROR = "provider_error"  # the provider reported a retryable error in the stream
    PROXY_ENDED = "proxy_ended"  # the proxy says its stream ended interrupted; nothing to read on


class Shown(Enum):
    """How far the attempt got before it failed."""

    NOTHING = "nothing"  # the request was not accepted (no answer, a 429/5xx, a connect error)
    ANSWERED = "answered"  # the provider accepted it (a 2xx), nothing visible yet
    CONTENT = "content"  # a content delta reached the caller


class ResumeTarget(Enum):
    """Where the same generation can be read on, if anywhere."""

    NONE = "none"
    SSE = "sse"  # Last-Event-ID to a server known to honour it (an unbroken proxy, resume="sse")
    BACKGROUND = "background"  # an OpenAI background response, by starting_after


class Decision(Enum):
    RESUME = "resume"  # the same generation, after the last committed frame
    RETRY = "retry"  # a fresh attempt; no generation was started
    REGENERATE = "regenerate"  # a fresh attempt, a second generation (Retry.after_response)
    GIVE_UP = "give_up"


# Rule: a resume continues the same generation, so it wins whenever the stream can be read on,
# even before anything was shown. A fresh attempt starts the generation again: allowed only
# while nothing is visible (no sentence is shown twice), and once the provider answered it is a
# second generation (the first may be billed), so the caller may forbid it. A stream the proxy
# ended was accepted (the proxy starts a stream only once its upstream answered 2xx). A
# provider error or a stream the proxy ended is never resumed:
# reading on gives nothing new. A retryable failure after content with no resume target gives
# up: the partial text is kept, interrupted. (Non-retryable failures, a finish reason already
# received and an exhausted budget give up before this table is consulted.)
DECISIONS: Final[dict[tuple[Failure, Shown, ResumeTarget], Decision]] = {
    **{(Failure.BROKEN, shown, target): Decision.RESUME
       for shown in Shown for target in (ResumeTarget.SSE, ResumeTarget.BACKGROUND)},
    (Failure.BROKEN, Shown.NOTHING, ResumeTarget.NONE): Decision.RETRY,
    (Failure.BROKEN, Shown.ANSWERED, ResumeTarget.NONE): Decision.REGENERATE,
    (Failure.BROKEN, Shown.CONTENT, ResumeTarget.NONE): Decision.GIVE_UP,
    **{(Failure.PROVIDER_ERROR, Shown.NOTHING, target): Decision.RETRY
       for target in ResumeTarget},
    **{(failure, shown, target): Decision.REGENERATE
       for failure, shown in ((Failure.PROVIDER_ERROR, Shown.ANSWERED),
                              (Failure.PROXY_ENDED, Shown.NOTHING),
                              (Failure.PROXY_ENDED, Shown.ANSWERED))
       for target in ResumeTarget},
    **{(failure, Shown.CONTENT, target): Decision.GIVE_UP
       for failure in (Failure.PROVIDER_ERROR, Failure.PROXY_ENDED) for target in ResumeTarget},
}


def decide(failure: Failure, shown: Shown, target: ResumeTarget) -> Decision:
    """The table's answer (it covers every combination)."""
    return DECISIONS[failure, shown, target]
