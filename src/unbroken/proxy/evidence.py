"""``GET /v1/streams/{id}/capture``: a journaled stream as a capture, for ``unbroken inspect``.

The answer (``application/x-ndjson``) is the capture format of ``client/capture.py``, rebuilt
from the journal, so that an operator asked why a user saw half a sentence can run
``unbroken inspect`` / ``unbroken replay`` on a stream the proxy served:

- a header: method, the request path, dialect, ``started`` = when the stream was created, and
  ``"source": "unbroken-proxy-journal"`` with the stream id: the bytes are rebuilt, so they
  differ from the upstream's where it sent ``id:``/``retry:`` lines or comments (never
  journaled);
- one connection: status 200 and the headers the proxy answered with (no stream token);
- one read per journaled frame: ``t`` = its receive time minus the stream's creation time,
  ``b`` = the frame as the upstream's wire carried it (``wire.upstream_framing``), ``seq`` = its
  proxy seq; a frame journaled without a receive time (``FrameRecord.at`` 0.0, an upgraded
  SQLite file) keeps the time before it and says ``"untimed": true``;
- the end: ``eof`` for a stream that ended with its upstream's frames (completed, truncated,
  filtered, or failed on the upstream's own error); ``error`` for one the proxy ended
  (interrupted, cancelled, a malformed upstream body): the proxy's own last frame is not an
  upstream read, so it travels in the end record (``proxy_frame``) and the replay ends the way
  the journal did; ``live`` for a stream still going when its frames ran out. The end record
  also holds the stream's journaled ``usage`` (or ``null`` and ``usage_missing``, why): the
  usage-only chunk of an OpenAI chat stream whose usage the proxy asked for was never a frame,
  so only this record shows it.

The body streams: frames are read from the journal in batches of ``FOLLOW_BATCH``, never all at
once. Who may read it is who may read ``GET /v1/streams/{id}``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Final

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..client.capture import CANCELLED, LIVE
from ..finish import Status
from ..resumption import STREAM_ID_HEADER
from ..streams.journal import FrameRecord, Journal, StreamMeta, StreamRecord, StreamState
from ..streams.journal.base import FOLLOW_BATCH
from .relay import not_found
from .replay import SSE_HEADERS
from .wire import proxy_error_message, upstream_framing

if TYPE_CHECKING:
    from .app import ProxyApp

__all__ = ["CAPTURE_MEDIA_TYPE", "SOURCE", "capture", "capture_lines"]

CAPTURE_MEDIA_TYPE: Final = "application/x-ndjson"
SOURCE: Final = "unbroken-proxy-journal"
# End states whose last frame is the upstream's: the body's end closed them.
_UPSTREAM_ENDS: Final = frozenset({Status.COMPLETED, Status.TRUNCATED, Status.FILTERED,
                                   Status.FAILED})


async def capture(request: Request) -> Response:
    """The route's handler: the stream's capture, or 404 as ``GET /v1/streams/{id}`` would."""
    proxy: ProxyApp = request.app.state.proxy
    record = await proxy._readable(request, with_text=False)
    if record is None:
        return not_found()
    stream_id = record.meta.stream_id
    response = StreamingResponse(capture_lines(proxy.journal, record),
                                 media_type=CAPTURE_MEDIA_TYPE)
    response.headers["cache-control"] = "no-store"
    response.headers["content-disposition"] = f'attachment; filename="{stream_id}.jsonl"'
    return response


async def capture_lines(journal: Journal, record: StreamRecord) -> AsyncIterator[bytes]:
    """The capture's lines, a batch of frames at a time."""
    meta = record.meta
    stream_id = meta.stream_id
    yield _line({"unbroken_capture": 1, "method": "POST", "url": meta.request_path,
                 "dialect": meta.dialect, "started": meta.created, "source": SOURCE,
                 "stream_id": stream_id})
    yield _line({"connection": 1, "kind": "first", "status": 200,
                 "headers": dict(_sent_headers(meta))})
    reads = _Reads(meta)
    held: FrameRecord | None = None  # the last frame read: it may be the proxy's own end
    ended: StreamState | None = None
    while True:
        batch = await journal.read_after(stream_id, reads.cursor if held is None else held.seq,
                                         FOLLOW_BATCH)
        if batch:
            lines = [] if held is None else [reads.line(held)]
            lines += [reads.line(frame) for frame in batch[:-1]]
            held = batch[-1]
            yield b"".join(lines)
            continue
        if ended is not None:
            break  # read once more after the end state: nothing landed since
        now = await journal.get(stream_id, with_text=False)
        if now is None:
            if held is not None:
                yield reads.line(held)
            yield _line({"end": "error", "error": "the stream left the journal (expired) while "
                                                  "it was exported"})
            return
        if not now.state.ended:
            if held is not None:
                yield reads.line(held)
            yield _line({"end": LIVE, "status": now.state.status.value,
                         "last_seq": reads.cursor, "usage": now.state.usage})
            return
        ended = now.state  # an end state lands with (or after) the last frames: read again
    yield _end(meta.dialect, ended, held, reads)


class _Reads:
    """Turns frames into read records: wire bytes, time since the stream's creation, seq."""

    def __init__(self, meta: StreamMeta) -> None:
        self._framing = upstream_framing(meta.dialect, meta.media_type)
        self._stream_id = meta.stream_id
        self._created = meta.created
        self._t = 0.0
        self.cursor = 0  # the seq of the last frame turned into a read

    def time_of(self, frame: FrameRecord) -> tuple[float, bool]:
        """Seconds since creation, and whether the frame had a receive time."""
        if frame.at:
            self._t = max(0.0, round(frame.at - self._created, 6))
            return self._t, True
        return self._t, False

    def wire(self, frame: FrameRecord) -> bytes:
        return self._framing.frames(self._stream_id, [frame], first=False)

    def line(self, frame: FrameRecord) -> bytes:
        t, timed = self.time_of(frame)
        record: dict[str, Any] = {"t": t, "b": _b64(self.wire(frame)), "seq": frame.seq}
        if not timed:
            record["untimed"] = True
        self.cursor = frame.seq
        return _line(record)


def _end(dialect: str, state: StreamState, last: FrameRecord | None, reads: _Reads) -> bytes:
    """The read of the last frame, unless the proxy made it, then the end record."""
    status = state.status
    made_here = None if last is None else proxy_error_message(dialect, last)
    out = b""
    end: dict[str, Any]
    if made_here is not None and status not in _UPSTREAM_ENDS - {Status.FAILED}:
        assert last is not None
        t, _timed = reads.time_of(last)
        end = {"end": "error", "error": CANCELLED if status is Status.CANCELLED else made_here,
               "proxy_frame": {"seq": last.seq, "t": t, "b": _b64(reads.wire(last))}}
    else:
        if last is not None:
            out = reads.line(last)
        if status in _UPSTREAM_ENDS:
            end = {"end": "eof"}
        elif status is Status.CANCELLED:
            end = {"end": "error", "error": CANCELLED}
        else:  # ended by the proxy without a frame of its own (a re-attachable stream)
            end = {"end": "error", "error": _error_text(state)}
    end |= {"status": status.value, "finish_reason": state.finish_reason,
            "last_seq": state.last_seq, "usage": state.usage}
    if state.usage is None:
        end["usage_missing"] = state.usage_missing
    return out + _line(end)


def _error_text(state: StreamState) -> str:
    error = state.error or {}
    return str(error.get("message") or f"the stream ended {state.status.value}")


def _sent_headers(meta: StreamMeta) -> list[tuple[str, str]]:
    """The headers of the proxy's answer to the stream's request, less its stream token."""
    own = {"content-type", "cache-control", "x-accel-buffering"}
    headers = [(name.lower(), value) for name, value in meta.response_headers
               if name.lower() not in own]
    return [*headers, ("content-type", meta.media_type), *SSE_HEADERS,
            (STREAM_ID_HEADER.lower(), meta.stream_id)]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _line(record: dict[str, Any]) -> bytes:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
