"""What the proxy writes for a stream whose producer's process died (a ``RecoveredEnd`` of
``streams/lease.py``), and which of those streams its owner can continue upstream.

A provider stream gets the dialect's error frame last, so the official SDKs raise, except a
Responses background stream with a known response id: it stays continuable, and is re-attached
upstream (``starting_after``) when its owner next resumes it, since only that request carries
the owner's credential again. Its readers meanwhile get an error frame on the wire only. A
stream still ``pending`` (journaled before its upstream request left, write-ahead) says the
provider had not answered and that the generation may have run and been billed. An app
stream of ``unbroken.server`` in the same journal gets its own ``end`` frame.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..dialects import find_dialect
from ..finish import Status
from ..resumption import PROXY_MESSAGE_PREFIX, ProxyMark
from ..streams.app_stream import recovered_end as app_recovered_end
from ..streams.journal import FrameRecord, StreamRecord
from ..streams.lease import REATTACHABLE
from .wire import error_frame

__all__ = ["reattachable", "recovered_end"]


def reattachable(record: StreamRecord) -> bool:
    """A stream left by a dead producer that its upstream can continue (Responses background)."""
    state = record.state
    spec = find_dialect(record.meta.dialect)
    return (
        spec is not None
        and spec.resumes_upstream
        and record.meta.background
        and state.provider_id is not None
        and state.status is Status.INTERRUPTED
        and (state.error or {}).get("type") == REATTACHABLE
    )


def recovered_end(record: StreamRecord) -> tuple[dict[str, Any], FrameRecord | None]:
    """The error and the last frame of a stream whose producer is gone (no frame: the stream
    stays continuable upstream)."""
    app_end = app_recovered_end(record)
    if app_end is not None:
        return app_end
    if record.state.status is Status.PENDING:  # journaled before its request left
        message = (PROXY_MESSAGE_PREFIX + "the proxy stopped before the provider answered this "
                   "stream's request; the generation may have run and been billed")
    else:
        message = (PROXY_MESSAGE_PREFIX + "the proxy producing this stream stopped (its process "
                   "is gone or its lease expired) before the stream finished")
    error = {"type": REATTACHABLE, "message": message}
    interrupted = replace(record.state, status=Status.INTERRUPTED, error=error)
    if reattachable(replace(record, state=interrupted)):
        return error, None
    mark = ProxyMark(code=REATTACHABLE, status=Status.INTERRUPTED.value, resumable=False,
                     message=message)
    return error, error_frame(record.meta.dialect, record.state.last_seq + 1, mark,
                              _next_provider_seq(record))


def _next_provider_seq(record: StreamRecord) -> int | None:
    # The Responses error event continues the provider's numbering; a foreground Responses
    # stream's last frame number is its last seq minus one (sequence_number starts at 0).
    spec = find_dialect(record.meta.dialect)
    if spec is None or not spec.numbered:
        return None
    return record.state.last_seq
