"""Finding streams: which ones ended ``interrupted`` this morning, which ones a credential has.

``Journal.list_streams`` pages through the stored streams newest first, ordered by
``(created, stream_id)`` descending, so that two streams created in the same instant still
have a fixed order. A page's ``next_cursor`` names the position of its last stream; the next
page holds the streams strictly after it in that order. A stream created meanwhile is newer
than the position (or, with a clock that went back, older: then it is listed on a later page),
so pages never repeat a stream nor skip one that existed when the first page was read. A
stream purged meanwhile is simply no longer found.

The records are meta and state only: no text, no frames.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from ...finish import Status

if TYPE_CHECKING:
    from .records import StreamMeta, StreamRecord, StreamState

__all__ = [
    "DEFAULT_PAGE",
    "MAX_PAGE",
    "StreamPage",
    "StreamQuery",
    "page_of",
    "parse_statuses",
    "stream_query",
]

DEFAULT_PAGE: Final = 100
MAX_PAGE: Final = 1000
"""The most streams one call returns (the listing's cost per call is bounded by it)."""

Position = tuple[float, str]  # (created, stream_id) of a listed stream


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamQuery:
    """What to list, validated: ``statuses`` empty means any; ``since`` is inclusive and
    ``until`` exclusive (creation times, epoch seconds); ``before`` is the position after
    which the page starts (from a cursor)."""

    statuses: frozenset[Status] = frozenset()
    since: float | None = None
    until: float | None = None
    credential_hash: str | None = None
    limit: int = DEFAULT_PAGE
    before: Position | None = None

    def admits(self, meta: StreamMeta, state: StreamState) -> bool:
        """Whether a stream belongs on the page (all filters and the position)."""
        created = meta.created
        return (
            (not self.statuses or state.status in self.statuses)
            and (self.since is None or created >= self.since)
            and (self.until is None or created < self.until)
            and (self.credential_hash is None or meta.credential_hash == self.credential_hash)
            and (self.before is None or (created, meta.stream_id) < self.before)
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamPage:
    """One page of streams, newest first; ``next_cursor`` is ``None`` on the last page."""

    streams: tuple[StreamRecord, ...]
    next_cursor: str | None = None


def stream_query(
    *,
    status: Status | Iterable[Status] | None = None,
    since: float | None = None,
    until: float | None = None,
    credential_hash: str | None = None,
    limit: int = DEFAULT_PAGE,
    cursor: str | None = None,
) -> StreamQuery:
    """The query the arguments of ``list_streams`` describe; ``ValueError`` if they do not."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be 1 to {MAX_PAGE}, not {limit!r}")
    for name, bound in (("since", since), ("until", until)):
        if bound is not None and not math.isfinite(bound):
            raise ValueError(f"{name} must be a finite time, not {bound!r}")
    if status is None:
        statuses: frozenset[Status] = frozenset()
    elif isinstance(status, Status):  # a StrEnum is itself iterable (of characters)
        statuses = frozenset({status})
    else:
        statuses = frozenset(Status(value) for value in status)
        if not statuses:
            raise ValueError("status names no status: give None to list any")
    return StreamQuery(statuses=statuses, since=since, until=until,
                       credential_hash=credential_hash, limit=limit,
                       before=None if cursor is None else _position(cursor))


def parse_statuses(values: Iterable[str]) -> list[Status]:
    """Status names as given on a command line or a query (``"interrupted,failed"``, possibly
    repeated); ``ValueError`` naming the unknown ones. No name at all: an empty list."""
    names = [name.strip() for value in values for name in value.split(",") if name.strip()]
    known = {status.value for status in Status}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"unknown status {', '.join(unknown)}; expected some of "
                         f"{', '.join(status.value for status in Status)}")
    return [Status(name) for name in names]


def page_of(found: Sequence[StreamRecord], query: StreamQuery) -> StreamPage:
    """The page from what a journal found: up to ``limit + 1`` admitted streams, newest first
    (one more than the page, to know whether another page follows)."""
    streams = tuple(found[: query.limit])
    if len(found) <= query.limit:
        return StreamPage(streams=streams)
    last = streams[-1].meta
    return StreamPage(streams=streams, next_cursor=_cursor((last.created, last.stream_id)))


def _cursor(position: Position) -> str:
    created, stream_id = position
    text = f"{created!r} {stream_id}".encode()
    return base64.urlsafe_b64encode(text).decode("ascii").rstrip("=")


def _position(cursor: str) -> Position:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created, _, stream_id = text.partition(" ")
        position = (float(created), stream_id)
    except (binascii.Error, UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"not a cursor of this listing: {cursor[:40]!r}") from error
    if not stream_id or not math.isfinite(position[0]):
        raise ValueError(f"not a cursor of this listing: {cursor[:40]!r}")
    return position
