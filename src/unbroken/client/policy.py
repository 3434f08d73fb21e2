"""What the client may do when a connection fails: retry, resume, or stop.

The rule that keeps users from seeing a sentence twice: before the first content delta a retryable
failure may start the request again (nothing visible is duplicated); after it only a *resume* of
the same generation may continue, and only when the stream's identity is verified.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Literal

__all__ = ["Deadlines", "ResumeMode", "Retry", "retry_after_seconds"]

ResumeMode = Literal["auto", "sse", "openai-background", "none"]
RESUME_MODES: tuple[ResumeMode, ...] = ("auto", "sse", "openai-background", "none")


@dataclass(frozen=True, slots=True, kw_only=True)
class Retry:
    """Retry policy: up to ``attempts`` connections in a row without progress.

    The delay before attempt n (n = 1 for the first retry) is the server's word when it gave one
    (``Retry-After``, or the SSE ``retry:`` field), else ``backoff * 2**(n-1)`` capped at
    ``max_backoff``, with full jitter on its upper half.
    """

    attempts: int = 3
    backoff: float = 0.5
    max_backoff: float = 8.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("Retry.attempts must be at least 1")
        if self.backoff < 0 or self.max_backoff < 0:
            raise ValueError("Retry.backoff and Retry.max_backoff must not be negative")

    def delay(self, n: int, *, server_says: float | None = None, rng: random.Random) -> float:
        if server_says is not None:
            return max(server_says, 0.0)
        ceiling = min(self.max_backoff, self.backoff * 2 ** max(n - 1, 0))
        return float(ceiling / 2 + rng.random() * ceiling / 2)


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


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date; None when absent or unusable."""
    if not value:
        return None
    value = value.strip()
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())
