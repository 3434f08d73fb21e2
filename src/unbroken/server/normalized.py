"""``?format=unbroken`` on an app stream: the normalized event format (``normalized_sse.py``)
that ``unbroken.js`` and any page read the same way for proxy and app streams.

The journal holds the app's frames (``frames.py``); those that carry text, reasoning or a tool
call are turned back into unbroken's events and handed to a ``NormalizedEncoder``; the others
(dicts, the app's own SSE events, usage) count as frames and send nothing. The ``end`` event
comes from the stream's journaled ``end`` frame, so a response whose frames ran out before the
stream ended has none, and the reader reconnects with ``Last-Event-ID``. A resume after seq N
still reads from the first frame (the counts and the status are whole); the encoder sends only
what comes after N.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from ..events import Event, ReasoningDelta, TextDelta, ToolCallDelta
from ..finish import Status
from ..normalized_sse import NormalizedEncoder, StreamEnding
from ..streams.app_stream import END_EVENT
from ..streams.journal import FrameRecord, Journal
from .frames import KEEPALIVE, TEXT_EVENT

__all__ = ["events_of", "normalized_body"]


def events_of(frame: FrameRecord) -> list[Event]:
    """The events an app stream's frame stands for (none for a dict or an app's SSE event)."""
    if frame.event == TEXT_EVENT:
        return [TextDelta(seq=frame.seq, text=frame.text)]
    if frame.event == "reasoning":
        fields = json.loads(frame.data)
        return [ReasoningDelta(seq=frame.seq, text=fields.get("text", ""),
                               signature=fields.get("signature"))]
    if frame.event == "tool_call":
        fields = json.loads(frame.data)
        return [ToolCallDelta(seq=frame.seq, index=fields["index"], id=fields.get("id"),
                              name=fields.get("name"), arguments=fields.get("arguments", ""))]
    return []


async def normalized_body(journal: Journal, stream_id: str, after: int,
                          keepalive: float) -> AsyncIterator[bytes]:
    encoder = NormalizedEncoder(stream_id, after=after)
    follow = journal.follow(stream_id, 0, keepalive=keepalive)
    try:
        async for batch in follow:
            if not batch:
                yield KEEPALIVE
                continue
            out: list[bytes] = []
            for frame in batch:
                if frame.event == END_EVENT:
                    end = json.loads(frame.data)
                    out.append(encoder.end(StreamEnding.of_fields(
                        Status(end["status"]), end["finish_reason"], end["raw_finish_reason"],
                        end["error"])))
                else:
                    out.append(encoder.frame(frame.seq, events_of(frame)))
            if any(out):
                yield b"".join(out)
    finally:
        await follow.aclose()
