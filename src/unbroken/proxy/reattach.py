"""Re-attaching a Responses background stream upstream after its producer's process died.

The journal holds every frame the dead producer committed. A new producer reads them back into
a receiver (so it knows the response id, the message so far and the last ``sequence_number``),
reopens the stream's live tail, takes its lease, and starts with
``GET /v1/responses/{id}?stream=true&starting_after=N`` using the credential of the request that
asked to resume: the owner's, the only one the proxy may use for it. Readers see one stream, the
proxy's seqs going on from where the journal stopped.
"""

from __future__ import annotations

import time
from dataclasses import replace

import httpx2

from .._receiver import StreamReceiver
from ..dialects import dialect_class
from ..finish import Status
from ..message import Message
from ..streams.journal import FrameRecord, Journal, Lease, StreamRecord
from ..streams.journal.base import FOLLOW_BATCH
from .config import ProxyConfig
from .upstream import Producer, UpstreamRequest

__all__ = ["continue_upstream", "sse_bytes"]


def sse_bytes(frames: list[FrameRecord]) -> bytes:
    """Journaled SSE frames back as a body (event and data lines; ids are not needed)."""
    out: list[bytes] = []
    for frame in frames:
        if frame.event is not None:
            out.append(b"event: " + frame.event.encode() + b"\n")
        for line in frame.data.split(b"\n"):
            out.append(b"data: " + line + b"\n")
        out.append(b"\n")
    return b"".join(out)


async def _replayed(journal: Journal, record: StreamRecord, config: ProxyConfig) -> StreamReceiver:
    receiver = StreamReceiver(record.meta.dialect, max_event_size=config.max_event_size,
                              message=Message(trace=False, keep_text=False))
    cursor = 0
    while True:
        frames = await journal.read_after(record.meta.stream_id, cursor, FOLLOW_BATCH)
        if not frames:
            return receiver
        receiver.receive_data(sse_bytes(frames))
        cursor = frames[-1].seq


async def continue_upstream(
    *,
    journal: Journal,
    client: httpx2.AsyncClient,
    config: ProxyConfig,
    record: StreamRecord,
    headers: list[tuple[str, str]],
    lease: Lease,
) -> Producer | None:
    """A producer (not started) that continues the stream upstream, or ``None`` if it is live
    again already (another request re-attached it meanwhile)."""
    receiver = await _replayed(journal, record, config)
    stream_id = record.meta.stream_id
    if journal.tail(stream_id) is not None or receiver.message.id is None:
        return None
    route = dialect_class(record.meta.dialect).route
    origin = config.origin(route.provider.name)
    state = replace(record.state, status=Status.STREAMING, updated=time.time(), error=None)
    tail = await journal.reopen(stream_id, state, lease)
    producer = Producer(
        journal=journal, client=client, config=config, meta=record.meta, tail=tail,
        request=UpstreamRequest(url=origin + route.paths[0], headers=headers, body=b"",
                                origin=origin, background=True),
        response=None,
    )
    producer.continue_after(receiver, seq=record.state.last_seq,
                            provider_seq=receiver.message.last_seq,
                            upstream_requests=record.state.upstream_requests)
    return producer
