"""What the journals raise when their storage fails: a full disk under SQLite, a Redis that
went away. The proxy and ``unbroken.server`` answer those with 503 (retry later), never 500."""

from __future__ import annotations

import contextlib
import sqlite3

__all__ = ["JOURNAL_ERRORS"]


def _journal_errors() -> tuple[type[Exception], ...]:
    """The storage errors (``TimeoutError`` is an ``OSError``); Redis's only with its extra."""
    errors: list[type[Exception]] = [OSError, sqlite3.Error]
    with contextlib.suppress(ImportError):  # the redis extra
        from redis.exceptions import RedisError

        errors.append(RedisError)
    return tuple(errors)


JOURNAL_ERRORS = _journal_errors()
