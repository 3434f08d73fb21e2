"""``GET /v1/streams/{id}/events?format=unbroken``: a journaled stream in the normalized format.

The journal holds the provider's frames; each is parsed again with the stream's dialect
(``StreamReceiver``, fed the frames as the events endpoint would send them) and handed to a
``NormalizedEncoder``. A resume after seq N still reads from the first frame, so that the
dialect's state (which content block is a tool call), the counts and the status are whole; the
encoder sends only what comes after N. Then the live tail, then the end.

The end comes from the journal's state, not from the frames: the frames the proxy writes itself
when a stream breaks (``wire.error_frame``, marked as its own) are left out, and the ``end``
event says what the journal says (``interrupted``, ``cancelled`` ...).
A response whose frames ran out before the stream ended (see ``replay.end_notice``) ends with no
``end`` event, so the reader reconnects with ``Last-Event-ID``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from starlette.responses import StreamingResponse

from .._receiver import StreamReceiver
from ..framing import SSE
from ..normalized_sse import MEDIA_TYPE, NormalizedEncoder, StreamEnding
from ..resumption import STREAM_ID_HEADER
from ..streams.journal import Journal
from .producer_lost import reattachable
from .replay import SSE_HEADERS
from .wire import (
    KEEPALIVE_COMMENT,
    Downstream,
    framing_of,
    proxy_error_message,
    upstream_framing,
)

__all__ = ["normalized_response"]


async def normalized_body(journal: Journal, stream_id: str, dialect: str, after: int,
                          keepalive: float) -> AsyncIterator[bytes]:
    encoder = NormalizedEncoder(stream_id, after=after)
    if framing_of(dialect).text:  # frames as SSE with the proxy's ids: seqs as journaled
        receiver = StreamReceiver(dialect, message=encoder.message, framing=SSE)
        framing = Downstream(media_type="text/event-stream", dialect=dialect, keepalive=None)
    else:  # a binary framing has no ids: frames from seq 1 on are numbered by position
        receiver = StreamReceiver(dialect, message=encoder.message)
        framing = upstream_framing(dialect, "")
    follow = journal.follow(stream_id, 0, keepalive=keepalive)
    try:
        async for batch in follow:
            if not batch:
                yield KEEPALIVE_COMMENT
                continue
            own = [frame for frame in batch if proxy_error_message(dialect, frame) is None]
            out = []
            if own and not receiver.finished:
                for frame in receiver.receive_data(framing.frames(stream_id, own, False),
                                                   time.time()):
                    if frame.committed:
                        out.append(encoder.committed(frame.seq, frame.events))
            if out:
                yield b"".join(out)
    finally:
        await follow.aclose()
    record = await journal.get(stream_id, with_text=False)
    if record is None or not record.state.ended or reattachable(record):
        return  # the reader reconnects and reads on (see replay.end_notice)
    state = record.state
    yield encoder.end(StreamEnding.of_fields(state.status, state.finish_reason,
                                             state.raw_finish_reason, state.error))


def normalized_response(journal: Journal, stream_id: str, dialect: str, after: int, *,
                        keepalive: float) -> StreamingResponse:
    """The normalized events of a stream after seq ``after``, then its live tail and end."""
    response = StreamingResponse(normalized_body(journal, stream_id, dialect, after, keepalive))
    headers = [("content-type", MEDIA_TYPE), *SSE_HEADERS, (STREAM_ID_HEADER.lower(), stream_id)]
    response.raw_headers = [(name.encode("latin-1"), value.encode("latin-1"))
                            for name, value in headers]
    return response
