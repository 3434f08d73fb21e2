"""What the journal holds for a stream of ``unbroken.server`` (an "app stream"), beside the
proxy's provider streams: its dialect name, and the ``end`` frame that closes every one.

An app stream's frames are the app's own (``server/frames.py`` encodes what a source yields);
its last journaled frame is always ``event: end`` whose data is a JSON object a browser reads
with ``JSON.parse``::

    {"status": "completed", "finish_reason": "stop", "raw_finish_reason": "stop",
     "error": null}

The end is here, in the engine, because not only the server writes it: any process that
recovers the stream after its producer's process died (the proxy on a shared journal, too)
writes ``interrupted`` with it.
"""

from __future__ import annotations

import time
from typing import Any, Final

from .._jsonparse import dumps_compact
from ..finish import Status
from .journal import FrameRecord, StreamRecord

__all__ = ["APP_DIALECT", "END_EVENT", "PRODUCER_LOST", "end_frame", "recovered_end"]

APP_DIALECT: Final = "app"
"""``StreamMeta.dialect`` of an app stream (a provider stream has its dialect's name)."""
END_EVENT: Final = "end"
PRODUCER_LOST: Final = "producer_lost"
"""The error type of an app stream whose producer's process stopped before it ended."""


def end_frame(seq: int, status: Status, *, finish_reason: str | None = None,
              raw_finish_reason: str | None = None,
              error: dict[str, Any] | None = None) -> FrameRecord:
    """The last frame of an app stream: how it ended, as JSON."""
    payload = {"status": status.value, "finish_reason": finish_reason,
               "raw_finish_reason": raw_finish_reason, "error": error}
    return FrameRecord(seq, END_EVENT, dumps_compact(payload).encode(), "", time.time())


def recovered_end(record: StreamRecord) -> tuple[dict[str, Any], FrameRecord | None] | None:
    """The ``interrupted`` end of an app stream whose producer is gone (a ``RecoveredEnd``);
    ``None`` for any other kind of stream."""
    if record.meta.dialect != APP_DIALECT:
        return None
    error = {"type": PRODUCER_LOST,
             "message": "the process producing this stream stopped before the stream ended"}
    return error, end_frame(record.state.last_seq + 1, Status.INTERRUPTED, error=error)
