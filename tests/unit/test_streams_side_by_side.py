"""One journal holds proxy streams and ``unbroken.server`` app streams side by side: each kind's
recovery writes its own end, the server's leaves the proxy's streams alone, and the listing
shows both."""

from __future__ import annotations

import json
import time

import pytest

from unbroken.finish import Status
from unbroken.proxy.producer_lost import recovered_end as proxy_end
from unbroken.streams.app_stream import APP_DIALECT, PRODUCER_LOST
from unbroken.streams.app_stream import recovered_end as app_end
from unbroken.streams.journal import FrameRecord, Journal, Lease, StreamMeta, StreamState
from unbroken.streams.lease import REATTACHABLE, LeaseKeeper, Recovery


async def _dead(journal: Journal, stream_id: str, dialect: str) -> None:
    meta = StreamMeta(stream_id=stream_id, dialect=dialect, created=1.0,
                      media_type="text/event-stream", token_hash="t", credential_hash="c")
    await journal.create(meta, StreamState(status=Status.PENDING, updated=time.time()),
                         Lease("gone", time.time() - 1))
    await journal.append(stream_id, [FrameRecord(1, "text", b'"a"', "a")],
                         StreamState(status=Status.STREAMING, updated=time.time(), last_seq=1))
    journal.release(stream_id)  # its producer died with its process


@pytest.mark.anyio
async def test_each_recovery_writes_its_kind_of_end(journal: Journal) -> None:
    await _dead(journal, "app-1", APP_DIALECT)
    await _dead(journal, "chat-1", "openai-chat")
    server = Recovery(journal, LeaseKeeper(journal, ttl=5, renew_every=1, kind="app"), app_end)
    await server.startup()
    server.close()
    app = await journal.get("app-1")
    chat = await journal.get("chat-1")
    assert app is not None and chat is not None
    assert (app.state.status, app.state.last_seq) == (Status.INTERRUPTED, 2)
    assert app.state.error is not None and app.state.error["type"] == PRODUCER_LOST
    assert chat.state.status is Status.STREAMING  # not the server's to settle
    [end] = await journal.read_after("app-1", 1, 10)
    assert end.event == "end"
    assert json.loads(end.data) == {"status": "interrupted", "finish_reason": None,
                                    "raw_finish_reason": None, "error": app.state.error}
    await _dead(journal, "app-2", APP_DIALECT)
    proxy = Recovery(journal, LeaseKeeper(journal, ttl=5, renew_every=1), proxy_end)
    await proxy.startup()
    proxy.close()
    chat = await journal.get("chat-1")
    app2 = await journal.get("app-2")
    assert chat is not None and app2 is not None
    assert chat.state.error is not None and chat.state.error["type"] == REATTACHABLE
    [error] = await journal.read_after("chat-1", 1, 10)
    assert json.loads(error.data)["error"]["code"] == REATTACHABLE  # the dialect's own frame
    [app_last] = await journal.read_after("app-2", 1, 10)
    assert app_last.event == "end"  # the proxy wrote the app stream's own end
    listed = await journal.list_streams(credential_hash="c")
    assert {record.meta.dialect for record in listed.streams} == {APP_DIALECT, "openai-chat"}
