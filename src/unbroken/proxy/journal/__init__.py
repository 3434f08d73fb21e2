"""The proxy's journal: one interface (``Journal``), a memory and a SQLite implementation.

``journal_for(store)`` builds one from a store URL: ``memory://`` or ``sqlite:///path.db``
(``sqlite:////abs/path.db`` for an absolute path; a relative path is from the working directory).
"""

from __future__ import annotations

from .base import (
    FrameRecord,
    Journal,
    JournalObserver,
    Lease,
    StreamMeta,
    StreamRecord,
    StreamState,
    Tombstone,
)
from .live import LiveTail
from .memory import MemoryJournal
from .sqlite import SQLiteJournal

__all__ = [
    "FrameRecord",
    "Journal",
    "JournalObserver",
    "Lease",
    "LiveTail",
    "MemoryJournal",
    "SQLiteJournal",
    "StreamMeta",
    "StreamRecord",
    "StreamState",
    "Tombstone",
    "journal_for",
]


def journal_for(store: str, *, tail_frames: int = 256) -> Journal:
    """The journal a store URL names; ``ValueError`` for anything else."""
    if store == "memory://":
        return MemoryJournal(tail_frames=tail_frames)
    prefix = "sqlite:///"
    if store.startswith(prefix) and len(store) > len(prefix):
        return SQLiteJournal(store[len(prefix) :], tail_frames=tail_frames)
    raise ValueError(f"unknown store {store!r}: use memory:// or sqlite:///path.db")
