"""What the client may do when a connection fails: retry, resume, or stop.

The rule that keeps users from seeing a sentence twice (written out, as a table, in
``resumption.py``): before the first content delta a retryable failure may start the request
again (nothing visible is duplicated); after it only a *resume* of the same generation may
continue, and only when the stream's identity is verified. Here: the policy's numbers.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Literal

from ..errors import (
    FirstEventTimeout,
    IdleTimeout,
    ProviderError,
    StreamError,
    StreamTimeout,
    TotalTimeout,
    TransportError,
    UpstreamStatusError,
)

__all__ = [
    "Deadlines",
    "ResumeMode",
    "Retry",
    "is_retryable",
    "retry_after_seconds",
    "server_retry_delay",
]

ResumeMode = Literal["auto", "sse", "openai-background", "none"]
RESUME_MODES: tuple[ResumeMode, ...] = ("auto", "sse", "openai-background", "none")


@dataclass(frozen=True, slots=True, kw_only=True)
class Retry:
    """Retry policy: ``attempts`` connections in a row without progress, and more while the
    failures in a row began less than ``budget`` seconds ago.

    The delay before attempt n (n = 1 for the first retry) is the server's word when it gave one
    (``Retry-After``, or the SSE ``retry:`` field), else ``backoff * 2**(n-1)`` capped at
    ``max_backoff``, with full jitter on its upper half; a pause past the budget is shortened
    to make the last attempt as the budget ends. The budget spans a proxy restart or a load
    balancer's failover (seconds), for SSE and NDJSON alike, where ``attempts`` alone spends
    about 1.5 s; the deadlines still apply (``total`` ends the retries, ``first_event`` and
    ``idle`` each connection). ``budget=None`` (or 0): ``attempts`` only, so
    ``Retry(attempts=1, budget=None)`` makes one attempt.

    ``after_response``: whether a fresh attempt may follow one the provider already accepted
    (a 2xx, nothing visible yet). That starts a second generation, and the first may be
    billed; ``False`` gives up instead (``Interrupted``). Either way the message counts its
    ``generations``. Which failure leads to what is the table ``resumption.DECISIONS``.
    """

    attempts: int = 3
    backoff: float = 0.5
    max_backoff: float = 8.0
    budget: float | None = 15.0
    after_response: bool = True

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("Retry.attempts must be at least 1")
        if self.backoff < 0 or self.max_backoff < 0:
            raise ValueError("Retry.backoff and Retry.max_backoff must not be negative")
        if self.budget is not None and not 0 <= self.budget < math.inf:
            raise ValueError("Retry.budget must be a finite number of seconds >= 0, or None")

    def delay(self, n: int, *, server_says: float | None = None, rng: random.Random) -> float:
        if server_says is not None:
            return max(server_says, 0.0)
        ceiling = min(self.max_backoff, self.backoff * 2 ** max(n - 1, 0))
        return float(ceiling / 2 + rng.random() * ceiling / 2)

    def next_delay(self, n: int, failing_for: float, *, server_says: float | None = None,
                   rng: random.Random) -> float | None:
        """The pause before attempt n + 1 after n failures in a row, the first of them
        ``failing_for`` seconds ago; ``None`` when the policy is spent."""
        delay = self.delay(n, server_says=server_says, rng=rng)
        if n < self.attempts:
            return delay
        left = (self.budget or 0.0) - failing_for
        if left <= 0:
            return None
        return min(delay, left)


@dataclass(frozen=True, slots=True, kw_only=True)
class Deadlines:
    """Deadlines in seconds; ``None`` switches one off.

    ``first_event``: from sending a request until the first content event. ``idle``: between
    content events (pings, comments and keep-alives do not reset it). ``total``: the whole stream,
    all attempts included.
    """

    connect: float | None = 10.0
    first_event: float | None = 60.0
    idle: float | None = 30.0
    total: float | None = None

    def error(self, which: str) -> StreamTimeout:
        """The error for the deadline ``which`` ("total", "first_event" or "idle") passing."""
        if which == "total" and self.total is not None:
            return TotalTimeout(f"the stream took over {self.total} s", seconds=self.total)
        if which == "first_event" and self.first_event is not None:
            seconds = self.first_event
            return FirstEventTimeout(f"no content event within {seconds} s", seconds=seconds)
        if which == "idle" and self.idle is not None:
            return IdleTimeout(f"no content for {self.idle} s", seconds=self.idle)
        raise ValueError(f"no {which} deadline is set")


def is_retryable(error: StreamError) -> bool:
    """Whether a fresh attempt (or a resume) may help: transport breaks, deadlines but the total
    one, 429 and 5xx answers, and provider errors marked retryable. Never a protocol error, a
    4xx or a wrong media type: asking again gives the same answer."""
    if isinstance(error, UpstreamStatusError | ProviderError):
        return error.retryable
    if isinstance(error, TotalTimeout):
        return False
    return isinstance(error, StreamTimeout | TransportError)


def server_retry_delay(headers: Mapping[str, str]) -> float | None:
    """The pause a refused request asks for: ``retry-after-ms`` (OpenAI and Azure send it, more
    precise than whole seconds), else ``Retry-After``; None when neither is usable."""
    millis = _non_negative(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    return retry_after_seconds(headers.get("retry-after"))


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date; None when absent or unusable
    (negative, not finite, or not a date)."""
    if not value:
        return None
    value = value.strip()
    seconds = _non_negative(value)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _non_negative(value: str | None) -> float | None:
    """A finite, non-negative number of seconds, else None (``nan`` would break a sleep)."""
    if not value:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None
