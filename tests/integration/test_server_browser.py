"""A real headless Chromium on ``examples/chat_app.py``: the page asks, reloads mid-answer, and
after the reload reads the whole answer to its end, with the answer's true status. And
``unbroken.js`` (served by ``streams.app``) reads an app stream to its end and stops another.

The test page is served by the example app's own origin (beside its routes), so the cookie
that names the user, the POST and the ``EventSource`` are exactly the example's. Needs the
``chromium`` package, as ``test_browser_eventsource.py``.
"""

from __future__ import annotations

import json
import queue
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx2
import pytest
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from tests.integration import test_browser_eventsource as browser_test
from tests.integration.test_server_example import chat_module  # noqa: F401  (a fixture)
from tests.servers import serve_in_thread

from unbroken.mock import reply_text

pytestmark = pytest.mark.integration

chromium = browser_test.chromium  # the session fixture, shared

# Phase 1: get the user cookie, POST /chat, read 5 text events, reload. Phase 2 (after the
# reload, the stream id in sessionStorage): read the stream from its start to the end event,
# then POST the report.
PAGE = """<!doctype html>
<meta charset="utf-8"><title>reload mid-answer</title>
<script>
async function report(body) {
  await fetch("/test-report", {method: "POST", body: JSON.stringify(body)});
}
async function main() {
  let id = sessionStorage.getItem("streamId");
  const reloaded = id !== null;
  if (!reloaded) {
    await fetch("/");  // the example's page sets the user cookie
    const started = await (await fetch("/chat", {method: "POST",
      headers: {"content-type": "application/json"},
      body: JSON.stringify({message: "hi", request_id: "browser-1"})})).json();
    id = started.stream_id;
    sessionStorage.setItem("streamId", id);
  }
  const seen = {text: "", ids: [], end: null, reloaded};
  const source = new EventSource(`/chat/${id}/events`);
  source.addEventListener("text", (e) => {
    seen.text += JSON.parse(e.data);
    seen.ids.push(e.lastEventId);
    if (!reloaded && seen.ids.length === 5) { source.close(); location.reload(); }
  });
  source.addEventListener("end", (e) => {
    seen.end = JSON.parse(e.data);
    seen.ids.push(e.lastEventId);
    source.close();
    report(seen);
  });
}
main().catch((error) => report({error: String(error)}));
</script>
"""


def test_an_answer_survives_a_reload_in_a_real_browser(
        chromium: str, chat_module: ModuleType, tmp_path: Path) -> None:  # noqa: F811
    reports: queue.Queue[dict[str, Any]] = queue.Queue()
    app = chat_module.app

    async def page(request: Request) -> Response:
        reports.put({"fetched": 0.0})
        return HTMLResponse(PAGE)

    async def collect(request: Request) -> Response:
        reports.put(json.loads(await request.body()))
        return Response(status_code=204)

    app.add_route("/test-page", page, methods=["GET"])
    app.add_route("/test-report", collect, methods=["POST"])
    with serve_in_thread(app) as url:
        seen = browser_test.browse(chromium, url + "/test-page", reports, tmp_path / "profile")
    assert "error" not in seen, seen
    assert seen["reloaded"] is True
    assert seen["end"] == {"status": "completed", "finish_reason": "stop",
                           "raw_finish_reason": "stop", "error": None}
    assert seen["text"] == reply_text(0, 120)
    stream_id = seen["ids"][0].rpartition(":")[0]
    assert seen["ids"] == [f"{stream_id}:{seq}" for seq in range(1, len(seen["ids"]) + 1)]


JS_PAGE = """<!doctype html>
<meta charset="utf-8"><title>unbroken.js on app streams</title>
<script type="module">
import { attach } from "/v1/streams/unbroken.js";

async function report(body) {
  await fetch("/test-report", {method: "POST", body: JSON.stringify(body)});
}
async function startOne(query) {
  return (await fetch(`/start?owner=alice&${query}`, {method: "POST"})).json();
}
try {
  const a = await startOne("kind=str&n=20&interval=0.02");
  const first = attach("", a.stream_id, {token: a.token});
  await first.done;
  const b = await startOne("kind=str&n=3000&interval=0.02");
  const second = attach("", b.stream_id, {token: b.token});
  await new Promise((resolve) => second.addEventListener("change", () => {
    if (second.text.length > 20) resolve();
  }));
  await second.stop();
  await report({first: {state: first.state.name, text: first.text, lastSeq: first.lastSeq},
                second: {state: second.state.name, id: b.stream_id}});
} catch (error) {
  await report({error: String(error)});
}
</script>
"""


def test_unbroken_js_reads_and_stops_app_streams(
        chromium: str, tmp_path: Path, mock_server: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.integration.server_app import build_app

    monkeypatch.setenv("UNBROKEN_TEST_MOCK", mock_server)
    reports: queue.Queue[dict[str, Any]] = queue.Queue()
    app, _streams = build_app("memory://", keepalive=0.5)

    async def page(request: Request) -> Response:
        reports.put({"fetched": 0.0})
        return HTMLResponse(JS_PAGE)

    async def collect(request: Request) -> Response:
        reports.put(json.loads(await request.body()))
        return Response(status_code=204)

    app.add_route("/js-page", page, methods=["GET"])
    app.add_route("/test-report", collect, methods=["POST"])
    with serve_in_thread(app) as url:
        seen = browser_test.browse(chromium, url + "/js-page", reports, tmp_path / "profile")
        assert "error" not in seen, seen
        second = httpx2.get(f"{url}/streams/{seen['second']['id']}",
                            headers={"x-owner": "alice"}, timeout=10).json()
    assert seen["first"] == {"state": "completed",
                             "text": "".join(f"t{i}\r\n✓ " for i in range(1, 21)),
                             "lastSeq": 20}
    assert seen["second"]["state"] == "cancelled"
    assert second["status"] == "cancelled"
