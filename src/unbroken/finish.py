"""End states and finish reasons, shared by every dialect.

``Status`` is where a message stands; ``FinishReason`` is the provider's reason, normalized. Each
dialect module holds its own table from the provider's raw strings to a ``(Status, FinishReason)``
pair; ``UNMAPPED`` is what an unknown raw reason becomes (the raw string is always kept).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["END_STATES", "STATUS_OF_REASON", "UNMAPPED", "FinishReason", "Status"]


class Status(StrEnum):
    PENDING = "pending"
    STREAMING = "streaming"
    COMPLETED = "completed"
    TRUNCATED = "truncated"
    FILTERED = "filtered"
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    CANCELLED = "cancelled"


class FinishReason(StrEnum):
    STOP = "stop"
    LENGTH = "length"
    CONTENT_FILTER = "content_filter"
    TOOL_CALLS = "tool_calls"
    PAUSE = "pause"
    ERROR = "error"
    OTHER = "other"


END_STATES = frozenset(
    {
        Status.COMPLETED,
        Status.TRUNCATED,
        Status.FILTERED,
        Status.INTERRUPTED,
        Status.FAILED,
        Status.CANCELLED,
    }
)

# A raw reason no table knows: the stream did end by the provider's word, so it is completed,
# but the reason is "other" and the trace carries a warning.
UNMAPPED = (Status.COMPLETED, FinishReason.OTHER)

# The end state a normalized finish reason gives (every dialect's table agrees with it): what a
# journal that kept a stream's finish reason, but not its end, ends it as.
STATUS_OF_REASON = {
    FinishReason.STOP: Status.COMPLETED,
    FinishReason.TOOL_CALLS: Status.COMPLETED,
    FinishReason.PAUSE: Status.COMPLETED,
    FinishReason.OTHER: Status.COMPLETED,
    FinishReason.LENGTH: Status.TRUNCATED,
    FinishReason.CONTENT_FILTER: Status.FILTERED,
    FinishReason.ERROR: Status.FAILED,
}
