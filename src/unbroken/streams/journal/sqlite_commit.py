"""The SQLite journal's write path: the group commit's batch and the checkpoint thread.

``GroupCommit`` holds everything queued for one group commit (creates, purges and lease writes
as callables, frame rows, stream rows to rewrite, the appends to announce once it lands) and
commits it in one transaction, all or nothing. ``Checkpointer`` is the background thread that
moves the WAL into the database file, so that its ``fsync`` never runs on the event loop. When
a batch is committed (the scheduling) and who is woken after it stays in ``SQLiteJournal``
(``sqlite.py``); these two know nothing of the event loop beyond the batch's one future.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .records import FrameRecord, StreamState
from .sqlite_schema import INSERT_FRAMES, UPDATE_STATE, connect

__all__ = ["Checkpointer", "GroupCommit", "Write"]

Write = Callable[[sqlite3.Connection], Any]
"""A write other than an append (a create, a purge, a lease), run inside a group commit."""


class Checkpointer(threading.Thread):
    """Moves the WAL into the database file every ``every`` seconds, off the event loop."""

    def __init__(self, path: str, every: float) -> None:
        super().__init__(name="unbroken-journal-checkpoint", daemon=True)
        self._path = path
        self._every = every
        self._stopping = threading.Event()

    def run(self) -> None:
        conn = connect(self._path, read_only=False)
        try:
            while not self._stopping.wait(self._every):
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            conn.close()

    def stop(self) -> None:
        self._stopping.set()
        self.join()


class GroupCommit:
    """Everything queued for one group commit, and the one future its writers await."""

    __slots__ = ("appends", "future", "rows", "updates", "writes")

    def __init__(self, future: asyncio.Future[Any]) -> None:
        self.future = future
        self.writes: list[Write] = []  # creates and purges, in order, before the frames
        self.rows: list[tuple[Any, ...]] = []  # frame rows of every append
        self.updates: list[tuple[Any, ...]] = []  # stream rows to rewrite
        self.appends: list[tuple[str, Sequence[FrameRecord], StreamState]] = []

    def commit(self, conn: sqlite3.Connection) -> list[Any]:
        """One transaction for the whole batch: all of it lands, or none (it is rolled back)."""
        # IMMEDIATE: the write lock is taken (waiting out the busy timeout) before a write
        # reads. A deferred transaction that reads, then writes after another process
        # committed, fails at once with "database is locked": the busy timeout never applies.
        conn.execute("BEGIN IMMEDIATE")
        try:
            results = [write(conn) for write in self.writes]
            if self.rows:
                conn.executemany(INSERT_FRAMES, self.rows)
            if self.updates:
                updated = conn.executemany(UPDATE_STATE, self.updates).rowcount
                if updated != len(self.updates):
                    raise KeyError("an append names a stream that does not exist")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return results
