"""The proxy's journal: one interface (``Journal``, ``base.py``), its record values
(``records.py``), and a memory, a SQLite and a Redis implementation.

``journal_for(store)`` builds one from a store URL: ``memory://``, ``sqlite:///path.db``
(``sqlite:////abs/path.db`` for an absolute path; a relative path is from the working directory),
or ``redis://host:6379/0`` / ``rediss://...`` (``RedisJournal``, shared by replicas; needs the
``redis`` extra; ``?prefix=`` sets the key prefix).
"""

from __future__ import annotations

from .base import Journal, JournalObserver
from .listing import MAX_PAGE, StreamPage, StreamQuery
from .live import TAIL_FRAMES, LiveTail
from .memory import MemoryJournal
from .records import FrameRecord, Lease, StreamMeta, StreamRecord, StreamState, Tombstone
from .redis_streams import RedisJournal
from .sqlite import SQLiteJournal

__all__ = [
    "MAX_PAGE",
    "FrameRecord",
    "Journal",
    "JournalObserver",
    "Lease",
    "LiveTail",
    "MemoryJournal",
    "RedisJournal",
    "SQLiteJournal",
    "StreamMeta",
    "StreamPage",
    "StreamQuery",
    "StreamRecord",
    "StreamState",
    "Tombstone",
    "journal_for",
    "shown_store",
]


def journal_for(store: str, *, tail_frames: int = TAIL_FRAMES) -> Journal:
    """The journal a store URL names; ``ValueError`` for anything else."""
    if store == "memory://":
        return MemoryJournal(tail_frames=tail_frames)
    prefix = "sqlite:///"
    if store.startswith(prefix) and len(store) > len(prefix):
        return SQLiteJournal(store[len(prefix) :], tail_frames=tail_frames)
    if store.startswith(("redis://", "rediss://")):
        return RedisJournal(store, tail_frames=tail_frames)
    raise ValueError(f"unknown store {shown_store(store)!r}: use memory://, sqlite:///path.db or "
                     "redis://host:6379/0")


def shown_store(store: str) -> str:
    """The store URL without a password, for error messages."""
    scheme, sep, rest = store.partition("://")
    _userinfo, at, host = rest.rpartition("@")
    return f"{scheme}{sep}***@{host}" if at else store
