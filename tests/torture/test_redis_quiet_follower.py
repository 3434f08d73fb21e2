"""Issue 21's quiet follower: a stream whose upstream pauses 15 s, produced on replica A and read
on replica B of one real ``redis-server``. B's reader must get every frame on one connection (no
cut during the quiet), the stream must end completed with the exact text, and neither replica may
log a traceback."""

from __future__ import annotations

from pathlib import Path

import httpx2
from tests.integration.hardening_process import ProxyProcess
from tests.integration.test_proxy_support import CALLS
from tests.servers import serve_in_thread
from tests.torture.streams import AUTH, settled_status
from tests.torture.tally import Tally

from unbroken.framing import SSEDecoder
from unbroken.mock import create_app, reply_text

PAUSE_S = 15  # three times the follower's 5 s block


def test_a_follower_on_the_other_replica_survives_a_15_s_pause(tmp_path: Path,
                                                               redis_url: str) -> None:
    call = CALLS["openai-chat"]
    scenario = f"seed=31; tokens=6; stall_after=3; stall_s={PAUSE_S}"
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    frames: list[str] = []
    cut = ""
    with serve_in_thread(create_app()) as mock, \
            ProxyProcess.start(mock, redis_url, logs[0]) as a, \
            ProxyProcess.start(mock, redis_url, logs[1]) as b, \
            httpx2.stream("POST", a.base_url + call.path, json=call.body, timeout=60,
                          headers=call.headers(scenario)) as produced:
        stream_id = produced.headers["unbroken-stream-id"]
        try:
            with httpx2.stream("GET", f"{b.base_url}/v1/streams/{stream_id}/events",
                               headers=AUTH, timeout=PAUSE_S * 3) as followed:
                decoder = SSEDecoder()
                for chunk in followed.iter_raw():
                    frames += [e.block_id or "" for e in decoder.receive_data(chunk)]
        except httpx2.TransportError as error:
            cut = repr(error)
        status = settled_status(a.base_url, stream_id)
    tracebacks = [log.name for log in logs if "Traceback" in log.read_text(errors="replace")]
    Tally("Redis follower, 15 s quiet, other replica", streams=1,
          exact=int(not cut and status["text"] == reply_text(31, 6)),
          notes={"cut": cut, "tracebacks": tracebacks}).write()
    assert cut == ""
    assert frames == [f"{stream_id}:{n}" for n in range(1, call.total(6) + 1)]
    assert (status["status"], status["text"]) == ("completed", reply_text(31, 6))
    assert tracebacks == []
