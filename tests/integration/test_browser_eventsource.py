"""A real headless Chromium reads a proxy stream with ``EventSource`` from another origin.

The page is served by a tiny Starlette app on one 127.0.0.1 port, the proxy (in front of the mock)
on another, so every request the page makes to the proxy is cross-origin and goes through the
browser's own CORS checks. The page collects each message's ``lastEventId`` and ``data``; when
the stream ends the browser reconnects with ``Last-Event-ID``, gets 204 and closes the source;
then the page checks with ``fetch`` that it can see that 204 (a response without CORS headers
would be an opaque network error), and POSTs a JSON report to its own origin.

Needs the ``chromium`` package; skipped without it unless ``UNBROKEN_REQUIRE_BROWSER=1`` (CI).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route
from tests.integration.test_proxy_support import CALLS, KEY, mock_counts, running_proxy
from tests.servers import serve_in_thread

from unbroken.mock import reply_deltas

pytestmark = pytest.mark.integration

# A cold Chromium on a fresh machine (binary and fonts not yet in the page cache) can take many
# seconds to start; the session fixture starts it once, bounded by WARM_UP_TIMEOUT_S, before any
# test's clock runs. The report timeout then covers only the page's own work, with headroom for a
# loaded 2-core CI machine.
WARM_UP_TIMEOUT_S = 180.0
REPORT_TIMEOUT_S = 60.0
CHAT = CALLS["openai-chat"]
TOKENS = 12
LAST = TOKENS + 3  # openai-chat frames: role, TOKENS deltas, finish, [DONE]
CLOSED = 2  # EventSource.CLOSED

# The page: ?src= an events URL to read; or ?create= a proxy URL to POST a stream to first
# (with ?key= and ?scenario=), reading its id and token from the exposed response headers.
PAGE = """<!doctype html>
<meta charset="utf-8"><title>unbroken EventSource</title>
<script>
const params = new URLSearchParams(location.search);
const report = {messages: [], opens: 0, errorStates: [], created: null, stopStatus: null};

function send() {
  fetch("/report", {method: "POST", headers: {"content-type": "application/json"},
                    body: JSON.stringify(report)});
}

async function stop(src) {
  // What the browser's own reconnect saw: readable only if the 204 carries CORS headers.
  const last = report.messages.length ? report.messages[report.messages.length - 1].id : "";
  try {
    const response = await fetch(src, {headers: {"accept": "text/event-stream",
                                                 "last-event-id": last}});
    report.stopStatus = response.status;
  } catch (error) {
    report.stopStatus = "blocked";
  }
  send();
}

function read(src) {
  const source = new EventSource(src);
  source.onopen = () => { report.opens += 1; };
  source.onmessage = (event) => {
    report.messages.push({id: event.lastEventId, data: event.data});
  };
  source.onerror = () => {
    report.errorStates.push(source.readyState);
    if (source.readyState === EventSource.CLOSED) {
      report.readyState = source.readyState;
      stop(src);
    }
  };
}

async function create(proxy) {
  const response = await fetch(proxy + "/v1/chat/completions", {
    method: "POST",
    headers: {"authorization": "Bearer " + params.get("key"), "content-type": "application/json",
              "unbroken-mock": params.get("scenario")},
    body: JSON.stringify({model: "m", stream: true,
                          messages: [{role: "user", content: "hi"}]}),
  });
  const id = response.headers.get("Unbroken-Stream-Id");
  const token = response.headers.get("Unbroken-Stream-Token");
  const body = await response.text();
  report.created = {status: response.status, id: id, bodyLength: body.length,
                    tokenLength: token === null ? null : token.length};
  read(proxy + "/v1/streams/" + id + "/events?token=" + encodeURIComponent(token));
}

if (params.has("create")) {
  create(params.get("create")).catch((error) => { report.created = String(error); send(); });
} else {
  read(params.get("src"));
}
</script>
"""

# Keep Chromium on 127.0.0.1: no background services, no proxy, no name resolution.
CHROMIUM_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
    "--disable-sync", "--disable-component-update", "--disable-default-apps",
    "--disable-extensions", "--disable-breakpad", "--disable-crash-reporter",
    "--disable-domain-reliability", "--disable-client-side-phishing-detection",
    "--metrics-recording-only", "--safebrowsing-disable-auto-update", "--no-pings",
    "--password-store=basic", "--no-proxy-server",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
)


def chromium_path() -> str:
    found = shutil.which("chromium") or (
        "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None)
    if found is None:
        if os.environ.get("UNBROKEN_REQUIRE_BROWSER") == "1":
            pytest.fail("UNBROKEN_REQUIRE_BROWSER=1 but there is no chromium "
                        "(apt-get install chromium)")
        pytest.skip("needs a headless browser: install the chromium package")
    return found


@pytest.fixture(scope="session")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The browser, started once and shut down so that each test's launch is a warm one."""
    path = chromium_path()
    profile = tmp_path_factory.mktemp("chromium-warm-up")
    try:
        done = subprocess.run(
            [path, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom",
             "data:text/html,<p>warm</p>"],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=WARM_UP_TIMEOUT_S,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"chromium did not render a data: page within {WARM_UP_TIMEOUT_S} s")
    if b"<p>warm</p>" not in done.stdout:
        pytest.fail(f"chromium could not render a data: page (exit {done.returncode}):\n"
                    + done.stderr.decode(errors="replace")[-3000:])
    return path


@contextmanager
def page_server() -> Iterator[tuple[str, queue.Queue[dict[str, Any]]]]:
    """The page's own origin: ``GET /`` the page, ``POST /report`` its result."""
    reports: queue.Queue[dict[str, Any]] = queue.Queue()

    async def page(request: Request) -> Response:
        reports.put({"fetched": time.monotonic()})  # evidence for a timeout's message
        return HTMLResponse(PAGE)

    async def report(request: Request) -> Response:
        reports.put(json.loads(await request.body()))
        return Response(status_code=204)

    async def favicon(request: Request) -> Response:
        return Response(status_code=204)

    app = Starlette(routes=[Route("/", page), Route("/report", report, methods=["POST"]),
                            Route("/favicon.ico", favicon)])
    with serve_in_thread(app) as origin:
        yield origin, reports


def browse(chromium: str, url: str, reports: queue.Queue[dict[str, Any]],
           profile: Path) -> dict[str, Any]:
    """Open ``url`` in a fresh headless Chromium; the page's report (bounded wait)."""
    log = profile.parent / "chromium.log"
    with log.open("wb") as output:
        started = time.monotonic()
        browser = subprocess.Popen(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", url],
            stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the renderers go with it
        )
        fetched: float | None = None
        try:
            while True:
                left = started + REPORT_TIMEOUT_S - time.monotonic()
                item = reports.get(timeout=max(left, 0.0))
                if "fetched" not in item:
                    return item
                fetched = item["fetched"]
        except queue.Empty:
            seen = ("the browser never fetched the page" if fetched is None
                    else f"the page was fetched {fetched - started:.1f} s after launch")
            pytest.fail(f"no report from the page within {REPORT_TIMEOUT_S} s ({seen}); "
                        "chromium said:\n" + log.read_text(errors="replace")[-3000:])
        finally:
            os.killpg(browser.pid, signal.SIGKILL)
            browser.wait(timeout=10)


def content_of(messages: list[dict[str, str]]) -> str:
    text = ""
    for message in messages:
        if message["data"] == "[DONE]":
            continue
        choices = json.loads(message["data"])["choices"]
        if choices:
            text += choices[0]["delta"].get("content") or ""
    return text


def expected_ids(stream_id: str, after: int) -> list[str]:
    return [f"{stream_id}:{seq}" for seq in range(after + 1, LAST + 1)]


@pytest.mark.parametrize(("after", "delay_ms"), [(None, 0), (5, 0), (None, 40)],
                         ids=["from-start", "after-5", "live-tail"])
def test_eventsource_reads_a_stream_from_another_origin(
    chromium: str, mock_server: str, tmp_path: Path, after: int | None, delay_ms: int
) -> None:
    scenario = f"seed=7; tokens={TOKENS}" + (f"; delay_ms={delay_ms}" if delay_ms else "")
    with page_server() as (page, reports), running_proxy(
        mock_server, cors_origins=(page,)
    ) as (proxy, _app):
        assert page != proxy
        # Create the stream; the live-tail case leaves at once, so the browser reads the
        # journal and then the frames still being generated.
        with httpx2.stream("POST", proxy + CHAT.path, json=CHAT.body,
                           headers=CHAT.headers(scenario), timeout=10) as created:
            assert created.status_code == 200
            stream_id = created.headers["unbroken-stream-id"]
            token = created.headers["unbroken-stream-token"]
            if not delay_ms:
                created.read()
        query = {"token": token} | ({} if after is None else {"after": str(after)})
        src = f"{proxy}/v1/streams/{stream_id}/events?{urlencode(query)}"
        report = browse(chromium, f"{page}/?{urlencode({'src': src})}", reports,
                        tmp_path / "profile")
    skipped = after or 0
    ids = [message["id"] for message in report["messages"]]
    assert ids == expected_ids(stream_id, skipped)
    assert report["messages"][-1]["data"] == "[DONE]"
    assert content_of(report["messages"]) == "".join(
        reply_deltas(7, TOKENS)[max(0, skipped - 1):])
    # One stream, then a reconnect with Last-Event-ID that got 204: the source closed.
    assert (report["opens"], report["errorStates"], report["readyState"]) == (1, [0, 2], CLOSED)
    assert report["stopStatus"] == 204
    assert mock_counts(mock_server)["generations"] == {"/v1/chat/completions": 1}


def test_a_page_creates_a_stream_with_fetch_and_reads_it(
    chromium: str, mock_server: str, tmp_path: Path
) -> None:
    with page_server() as (page, reports), running_proxy(
        mock_server, cors_origins=(page,)
    ) as (proxy, _app):
        query = {"create": proxy, "key": KEY, "scenario": f"seed=3; tokens={TOKENS}"}
        report = browse(chromium, f"{page}/?{urlencode(query)}", reports, tmp_path / "profile")
    # The preflighted POST went through, and the exposed headers were readable.
    created = report["created"]
    assert isinstance(created, dict), created
    stream_id = created["id"]
    # The page read the token header: "ubt_" and 43 characters of token_urlsafe(32).
    assert (created["status"], created["tokenLength"]) == (200, 47)
    assert [message["id"] for message in report["messages"]] == expected_ids(stream_id, 0)
    assert content_of(report["messages"]) == "".join(reply_deltas(3, TOKENS))
    assert (report["errorStates"], report["readyState"], report["stopStatus"]) == (
        [0, 2], CLOSED, 204)
    assert mock_counts(mock_server)["generations"] == {"/v1/chat/completions": 1}


def test_a_page_of_another_origin_reads_nothing(
    chromium: str, mock_server: str, tmp_path: Path
) -> None:
    with page_server() as (page, reports):
        # The same port under another host name is another origin.
        allowed = page.replace("127.0.0.1", "localhost")
        with running_proxy(mock_server, cors_origins=(allowed,)) as (proxy, _app):
            created = httpx2.post(proxy + CHAT.path, json=CHAT.body,
                                  headers=CHAT.headers(f"tokens={TOKENS}"), timeout=10)
            stream_id = created.headers["unbroken-stream-id"]
            token = created.headers["unbroken-stream-token"]
            src = f"{proxy}/v1/streams/{stream_id}/events?{urlencode({'token': token})}"
            report = browse(chromium, f"{page}/?{urlencode({'src': src})}", reports,
                            tmp_path / "profile")
    # The CORS check failed: no message, no open, the source closed without a retry, and
    # the page cannot even see a status.
    assert (report["messages"], report["opens"]) == ([], 0)
    assert (report["errorStates"], report["readyState"]) == ([CLOSED], CLOSED)
    assert report["stopStatus"] == "blocked"
