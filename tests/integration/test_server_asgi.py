"""``unbroken.server`` in a plain ASGI app (no Starlette, no FastAPI of its own), and with a
journal that fails: 503, and nothing half-written served as complete."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import httpx2
import pytest
from tests.servers import serve_in_thread

from unbroken.framing import SSEDecoder
from unbroken.server import ResumableStreams, StreamRefusedError
from unbroken.streams.journal import (
    FrameRecord,
    Lease,
    MemoryJournal,
    StreamMeta,
    StreamRecord,
    StreamState,
)

pytestmark = pytest.mark.integration


async def words(n: int, interval: float) -> AsyncIterator[str]:
    for i in range(1, n + 1):
        await asyncio.sleep(interval)
        yield f"w{i} "


def plain_asgi_app(streams: ResumableStreams, n: int = 6, interval: float = 0.01) -> Any:
    """A raw ASGI callable: the lifespan by hand, ``POST /chat`` starts a stream, ``/streams``
    forwards to ``streams.app``."""

    async def send_json(send: Any, status: int, body: dict[str, Any]) -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": json.dumps(body).encode()})

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await receive()
            await streams.open()
            await send({"type": "lifespan.startup.complete"})
            await receive()
            await streams.close()
            await send({"type": "lifespan.shutdown.complete"})
            return
        path: str = scope["path"]
        if path == "/chat" and scope["method"] == "POST":
            try:
                handle = await streams.start(words(n, interval), owner="user-1")
            except StreamRefusedError as exc:
                await send_json(send, exc.status, {"error": str(exc)})
                return
            await send_json(send, 200, {"stream_id": handle.stream_id, "token": handle.token})
        elif path.startswith("/streams/"):
            inner = {**scope, "path": path[len("/streams"):],
                     "root_path": scope.get("root_path", "") + "/streams"}
            await streams.app(inner, receive, send)
        else:
            await send_json(send, 404, {"error": "no route"})

    return app


def sse(body: bytes) -> list[tuple[str, str, str]]:
    decoder = SSEDecoder()
    events = decoder.receive_data(body) + decoder.receive_eof()
    return [(event.event, event.data, event.id) for event in events]


def test_a_plain_asgi_app_serves_resumable_streams() -> None:
    streams = ResumableStreams("memory://", keepalive=0.5)
    with serve_in_thread(plain_asgi_app(streams)) as url:
        started = httpx2.post(url + "/chat", timeout=10).json()
        stream_id, token = started["stream_id"], started["token"]
        whole = httpx2.get(f"{url}/streams/{stream_id}/events", params={"token": token},
                           timeout=20)
        rest = httpx2.get(f"{url}/streams/{stream_id}/events", params={"token": token},
                          headers={"last-event-id": f"{stream_id}:4"}, timeout=20)
        status = httpx2.get(f"{url}/streams/{stream_id}", params={"token": token}, timeout=10)
        stranger = httpx2.get(f"{url}/streams/{stream_id}/events", timeout=10)
    events = sse(whole.content)
    assert [data for _event, data, _id in events[:-1]] == [f'"w{i} "' for i in range(1, 7)]
    assert events[-1][0] == "end" and json.loads(events[-1][1])["status"] == "completed"
    assert sse(rest.content) == events[4:]
    assert status.json()["text"] == "w1 w2 w3 w4 w5 w6 "
    assert stranger.status_code == 404


class FailingJournal(MemoryJournal):
    """A memory journal whose storage fails while ``failing`` is set, as a full disk would."""

    failing = False

    def _check(self) -> None:
        if self.failing:
            raise sqlite3.OperationalError("disk I/O error")

    async def get(self, stream_id: str, *, with_text: bool = True) -> StreamRecord | None:
        self._check()
        return await super().get(stream_id, with_text=with_text)

    async def _create(self, meta: StreamMeta, state: StreamState, lease: Lease | None) -> None:
        self._check()
        await super()._create(meta, state, lease)

    async def read_after(self, stream_id: str, seq: int, limit: int) -> list[FrameRecord]:
        self._check()
        return await super().read_after(stream_id, seq, limit)

    def _store(self, stream_id: str, frames: Sequence[FrameRecord],
               state: StreamState) -> asyncio.Future[None]:
        if self.failing:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            future.set_exception(sqlite3.OperationalError("disk I/O error"))
            return future
        return super()._store(stream_id, frames, state)


@pytest.fixture
def failing() -> Iterator[tuple[str, FailingJournal]]:
    journal = FailingJournal()
    streams = ResumableStreams(journal, keepalive=0.2, idle_timeout=5)
    with serve_in_thread(plain_asgi_app(streams, n=500, interval=0.02)) as url:
        yield url, journal


def test_a_failing_journal_answers_503_and_never_a_false_end(
        failing: tuple[str, FailingJournal]) -> None:
    url, journal = failing
    started = httpx2.post(url + "/chat", timeout=10).json()
    stream_id, token = started["stream_id"], started["token"]
    with httpx2.stream("GET", f"{url}/streams/{stream_id}/events", params={"token": token},
                       timeout=20) as response:
        decoder = SSEDecoder()
        events = []
        for chunk in response.iter_raw():
            events += decoder.receive_data(chunk)
            if len(events) >= 2 and not journal.failing:
                journal.failing = True  # the disk fills up mid-stream
        events += decoder.receive_eof()
    assert "end" not in [event.event for event in events], events[-3:]
    assert events[-1].event == "incomplete" and events[-1].block_id is None  # not a frame
    assert [event.id for event in events[:-1]] == [
        f"{stream_id}:{seq}" for seq in range(1, len(events))]
    assert "journal is unavailable" in json.loads(events[-1].data)["message"]
    refused = httpx2.get(f"{url}/streams/{stream_id}/events", params={"token": token},
                         timeout=10)
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["type"] == "journal_unavailable"
    assert httpx2.post(url + "/chat", timeout=10).status_code == 503
    journal.failing = False
    # Healed: the producer is gone (its commits failed), so the stream is settled
    # interrupted, with the frames that did land; never completed.
    healed = httpx2.get(f"{url}/streams/{stream_id}/events", params={"token": token},
                        timeout=20)
    frames = sse(healed.content)
    assert frames[-1][0] == "end"
    assert json.loads(frames[-1][1])["status"] == "interrupted"
    assert [int(ident.rpartition(":")[2]) for _e, _d, ident in frames] == list(
        range(1, len(frames) + 1))
