"""``unbroken.js`` and the demo page in a real headless Chromium, against a real proxy + mock.

The page is served by the proxy's own origin (``unbroken demo --web`` serves it the same way), or
by another origin that the proxy allows (``--cors-origin``). The browser is driven over the
DevTools protocol (``tests/integration/devtools.py``): clicks and reads of the DOM, Chromium's
own network emulation for offline/online, and a screenshot of every end state, saved under
``tests/artifacts/browser/`` (ignored by git).

Needs the ``chromium`` package; skipped without it unless ``UNBROKEN_REQUIRE_BROWSER=1`` (CI).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from tests.integration.devtools import Page, chromium_page
from tests.integration.test_browser_eventsource import chromium  # noqa: F401  (a fixture)
from tests.integration.test_proxy_support import CALLS, KEY, mock_counts, proxy_config
from tests.servers import serve_in_thread

from unbroken._tool_calls import ToolCalls
from unbroken.events import ToolCallDelta
from unbroken.mock import reply_text
from unbroken.proxy import create_app
from unbroken.web import demo_page, with_demo_page

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

ARTIFACTS = Path(__file__).parents[1] / "artifacts" / "browser"
CHAT = CALLS["openai-chat"]
WAIT_S = 25.0  # a bound for one stream to end, with headroom for a loaded 2-core machine


@contextmanager
def demo(mock: str, *, wrap: Any = None, **options: Any) -> Iterator[str]:
    """The proxy in front of ``mock``, with the demo page on its own origin."""
    app: ASGIApp = with_demo_page(create_app(proxy_config(mock, **options)))
    with serve_in_thread(wrap(app) if wrap else app) as origin:
        yield origin


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


async def send(page: Page, scenario: str) -> None:
    """Pick a fault (any scenario: it is added to the picker) and press Send.

    The states are recorded from the moment the page takes the new stream (a setter on
    ``window.unbrokenDemo``, which the page assigns), not from the next poll: a poll of a
    loaded browser can come after a reconnect's whole 250 ms wait, and miss that state."""
    await page.evaluate(f"""(() => {{
        const select = document.getElementById('fault');
        select.add(new Option('test', {scenario!r}));
        select.value = {scenario!r};
        window.states = [];
        let current = window.unbrokenDemo;
        const previous = window.previous = current?.stream;
        const record = (stream) => {{
            const push = () => {{
                const s = stream.state;
                const last = window.states[window.states.length - 1];
                if (!last || last.name !== s.name || last.attempt !== s.attempt)
                    window.states.push({{name: s.name, attempt: s.attempt, text: stream.text}});
            }};
            push();
            stream.addEventListener('change', push);
        }};
        Object.defineProperty(window, 'unbrokenDemo', {{
            configurable: true, enumerable: true, get: () => current,
            set: (value) => {{
                const fresh = value?.stream && value.stream !== current?.stream
                    && value.stream !== previous;
                current = value;
                if (fresh) record(value.stream);
            }}}});
        document.getElementById('send').click();
        return 1; }})()""")
    await page.wait_for("window.unbrokenDemo && window.unbrokenDemo.stream !== window.previous",
                        10, "a stream")


async def ended(page: Page, timeout: float = WAIT_S) -> dict[str, Any]:
    await page.wait_for("window.unbrokenDemo && window.unbrokenDemo.stream.ended", timeout,
                        "the end")
    shown: dict[str, Any] = await page.evaluate("""(() => {
        const $ = (id) => document.getElementById(id);
        const s = window.unbrokenDemo.stream;
        return {state: $('badge').dataset.state, icon: $('icon').textContent,
                label: $('label').textContent, notice: $('notice').textContent,
                action: $('action').hidden ? null : $('action').textContent,
                announce: $('announce').textContent, answer: $('answer').textContent,
                live: $('announce').getAttribute('aria-live'),
                colour: getComputedStyle($('badge')).backgroundColor,
                text: s.text, connections: s.connections, duplicates: s.duplicates,
                id: s.streamId, httpStatus: s.state.httpStatus ?? null,
                reason: s.state.reason ?? null, states: window.states};
    })()""")
    return shown


async def seq_at_least(page: Page, seq: int) -> None:
    await page.wait_for(f"window.unbrokenDemo.stream.lastSeq >= {seq}", WAIT_S, f"seq {seq}")


# state: (scenario, expected text, icon, notice, action)
END_STATES = {
    "completed": ("seed=1; tokens=12; delay_ms=10", reply_text(1, 12), "✓", "", None),
    "truncated": ("seed=2; tokens=12; delay_ms=10; finish=length", reply_text(2, 12), "✂",
                  "stopped at the length limit — continue?", "Continue"),
    "filtered": ("seed=3; tokens=12; delay_ms=10; finish=content_filter", reply_text(3, 12),
                 "⊘", "filtered: content_filter", None),
    "failed": ("seed=4; tokens=12; delay_ms=10; error_at=6", CHAT.text_after(4, 12, 5), "✕",
               "The server had an error while processing your request. Sorry about that!",
               "Resend"),
    "interrupted": ("seed=5; tokens=12; delay_ms=10; drop_after=6", CHAT.text_after(5, 12, 6),
                    "⚠", "output interrupted — resend", "Resend"),
}


def test_every_end_state_is_shown_its_own_way(chromium: str, mock_server: str,  # noqa: F811
                                              tmp_path: Path) -> None:
    async def scenario(origin: str) -> list[dict[str, Any]]:
        seen = []
        async with chromium_page(chromium, tmp_path / "profile") as page:
            await page.goto(origin + "/")
            for state, (fault, *_rest) in END_STATES.items():
                await send(page, fault)
                seen.append(await ended(page))
                await page.screenshot(ARTIFACTS / f"{state}.png")
            # Stop: the cancel endpoint, while the slow stream is still generating.
            await send(page, "seed=6; tokens=200; delay_ms=100")
            await seq_at_least(page, 4)
            await page.evaluate("document.getElementById('stop').click(), 1")
            seen.append(await ended(page))
            await page.screenshot(ARTIFACTS / "cancelled.png")
        return seen

    with demo(mock_server) as origin:
        seen = run(scenario(origin))
        cancelled = seen[-1]
        status = httpx2.get(f"{origin}/v1/streams/{cancelled['id']}",
                            headers={"authorization": "Bearer sk-demo-page"}, timeout=10).json()
    for shown, (state, (_fault, text, icon, notice, action)) in zip(
            seen, END_STATES.items(), strict=False):
        assert (shown["state"], shown["label"], shown["icon"]) == (state, state, icon)
        assert (shown["notice"], shown["action"]) == (notice, action)
        assert shown["answer"] == shown["text"] == text  # the partial text is kept
        assert shown["announce"] == f"Answer {state}" + (f": {notice}" if notice else ".")
        assert shown["live"] == "polite"
    assert (cancelled["state"], cancelled["icon"], cancelled["notice"], cancelled["action"]) == (
        "cancelled", "■", "stopped", None)
    assert status["status"] == "cancelled"
    assert cancelled["answer"] == status["text"] != ""
    assert len({shown["colour"] for shown in seen}) == 6  # each end its own colour
    assert mock_counts(mock_server)["generations"] == {"/v1/chat/completions": 6}


def test_offline_then_online_resumes_with_the_exact_text(chromium: str,  # noqa: F811
                                                         mock_server: str,
                                                         tmp_path: Path) -> None:
    async def scenario(origin: str) -> dict[str, Any]:
        async with chromium_page(chromium, tmp_path / "profile") as page:
            await page.goto(origin + "/?" + urlencode({"retries": 8, "backoff_ms": 200}))
            await send(page, "seed=8; tokens=60; delay_ms=40")
            await seq_at_least(page, 8)
            await page.offline(True)
            await page.wait_for("window.unbrokenDemo.stream.state.name === 'reconnecting'",
                                WAIT_S, "reconnecting")
            await asyncio.sleep(0.5)  # generation goes on upstream meanwhile
            await page.offline(False)
            return await ended(page)

    with demo(mock_server) as origin:
        shown = run(scenario(origin))
    assert shown["state"] == "completed"
    assert shown["answer"] == shown["text"] == reply_text(8, 60)
    assert shown["connections"] >= 2
    assert any(state["name"] == "reconnecting" for state in shown["states"])
    assert mock_counts(mock_server)["generations"] == {"/v1/chat/completions": 1}


class CutFirstEvents:
    """Drops the first normalized events response after its third body chunk, as a server
    whose connection breaks does (no terminating chunk)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.cut = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/events") or self.cut:
            await self.app(scope, receive, send)
            return
        self.cut += 1
        chunks = 0

        async def counted(message: Message) -> None:
            nonlocal chunks
            if message["type"] == "http.response.body":
                chunks += 1
                if chunks > 3:
                    raise ConnectionAbortedError("cut on purpose by the test")
            await send(message)

        try:
            await self.app(scope, receive, counted)
        except ConnectionAbortedError:
            pass  # returning without finishing the response: uvicorn closes the connection


def test_a_dropped_connection_resumes_without_a_duplicate(chromium: str,  # noqa: F811
                                                          mock_server: str,
                                                          tmp_path: Path) -> None:
    async def scenario(origin: str) -> dict[str, Any]:
        async with chromium_page(chromium, tmp_path / "profile") as page:
            await page.goto(origin + "/")
            await send(page, "seed=9; tokens=30; delay_ms=20")
            return await ended(page)

    cutter: list[CutFirstEvents] = []

    def wrap(app: ASGIApp) -> ASGIApp:
        cutter.append(CutFirstEvents(app))
        return cutter[0]

    with demo(mock_server, wrap=wrap) as origin:
        shown = run(scenario(origin))
    assert cutter[0].cut == 1
    assert shown["state"] == "completed"
    assert shown["answer"] == reply_text(9, 30)
    assert shown["connections"] == 2
    names = [state["name"] for state in shown["states"]]
    assert names[names.index("reconnecting"):] == ["reconnecting", "streaming", "completed"]
    assert mock_counts(mock_server)["generations"] == {"/v1/chat/completions": 1}


class Breaker:
    """While ``broken``: the events response being sent is cut at its next chunk, and new
    events requests are answered 503 (a server that went away and comes back)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.broken = threading.Event()
        self.refused = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/events"):
            await self.app(scope, receive, send)
            return
        if self.broken.is_set():
            self.refused += 1
            await Response("down for a moment", status_code=503)(scope, receive, send)
            return

        async def breakable(message: Message) -> None:
            if message["type"] == "http.response.body" and self.broken.is_set():
                raise ConnectionAbortedError("cut on purpose by the test")
            await send(message)

        try:
            await self.app(scope, receive, breakable)
        except ConnectionAbortedError:
            pass


def test_a_tab_shown_again_reconnects_at_once(chromium: str, mock_server: str,  # noqa: F811
                                              tmp_path: Path) -> None:
    """Hidden (another tab in front) while the server is away, the page waits out a long
    reconnect delay; shown again, it reconnects at once instead of after that delay."""
    breakers: list[Breaker] = []

    def wrap(app: ASGIApp) -> ASGIApp:
        breakers.append(Breaker(app))
        return breakers[0]

    async def scenario(origin: str) -> tuple[dict[str, Any], list[str]]:
        async with chromium_page(chromium, tmp_path / "profile") as page:
            await page.goto(origin + "/?" + urlencode({"backoff_ms": 60000, "retries": 3}))
            await page.evaluate("window.seen = []; document.addEventListener('visibilitychange',"
                                " () => seen.push(document.visibilityState)); 1")
            await send(page, "seed=14; tokens=60; delay_ms=40")
            await seq_at_least(page, 6)
            other = await page.call("Target.createTarget", {"url": "about:blank"},
                                    session=False)
            breakers[0].broken.set()
            await page.wait_for("window.unbrokenDemo.stream.state.name === 'reconnecting'",
                                WAIT_S, "reconnecting")
            breakers[0].broken.clear()
            await page.call("Target.closeTarget", {"targetId": other["targetId"]},
                            session=False)
            # Far less than the 60 s reconnect delay: the tab shown again woke it.
            shown = await ended(page, timeout=20)
            return shown, await page.evaluate("window.seen")

    with demo(mock_server, wrap=wrap) as origin:
        shown, seen = run(scenario(origin))
    assert seen == ["hidden", "visible"]
    assert (shown["state"], shown["answer"]) == ("completed", reply_text(14, 60))
    assert shown["connections"] == 2
    assert mock_counts(mock_server)["generations"] == {"/v1/chat/completions": 1}


def test_a_reload_mid_stream_attaches_to_the_same_stream(chromium: str,  # noqa: F811
                                                         mock_server: str,
                                                         tmp_path: Path) -> None:
    async def scenario(origin: str) -> tuple[str, dict[str, Any]]:
        async with chromium_page(chromium, tmp_path / "profile") as page:
            await page.goto(origin + "/")
            await send(page, "seed=10; tokens=40; delay_ms=50")
            await seq_at_least(page, 6)
            first = await page.evaluate("window.unbrokenDemo.stream.streamId")
            await page.reload()
            return first, await ended(page)

    with demo(mock_server) as origin:
        first, shown = run(scenario(origin))
    assert shown["id"] == first
    assert (shown["state"], shown["answer"]) == ("completed", reply_text(10, 40))
    assert mock_counts(mock_server)["generations"] == {"/v1/chat/completions": 1}


def test_a_stalled_stream_is_resumed_by_the_watchdog(chromium: str,  # noqa: F811
                                                     mock_server: str,
                                                     tmp_path: Path) -> None:
    async def scenario(origin: str) -> dict[str, Any]:
        async with chromium_page(chromium, tmp_path / "profile") as page:
            await page.goto(origin + "/?" + urlencode({"idle_ms": 700}))
            await send(page, "seed=11; tokens=20; delay_ms=10; stall_after=8; stall_s=2.5")
            return await ended(page)

    with demo(mock_server, keepalive=0.2) as origin:
        shown = run(scenario(origin))
    assert shown["state"] == "completed"
    assert shown["answer"] == reply_text(11, 20)
    # The proxy's keep-alives (every 0.2 s) did not hide the stall from the watchdog.
    assert shown["connections"] >= 2
    assert "reconnecting" in [state["name"] for state in shown["states"]]
    assert mock_counts(mock_server)["generations"] == {"/v1/chat/completions": 1}


def test_interrupted_only_after_the_retry_budget(chromium: str, mock_server: str,  # noqa: F811
                                                 tmp_path: Path) -> None:
    async def scenario(origin: str) -> dict[str, Any]:
        async with chromium_page(chromium, tmp_path / "profile") as page:
            await page.goto(origin + "/?" + urlencode({"retries": 3, "backoff_ms": 100}))
            await send(page, "seed=12; tokens=200; delay_ms=50")
            await seq_at_least(page, 6)
            await page.offline(True)
            shown = await ended(page)
            await page.screenshot(ARTIFACTS / "interrupted-by-the-network.png")
            await page.offline(False)
            return shown

    with demo(mock_server) as origin:
        shown = run(scenario(origin))
    names = [(state["name"], state.get("attempt")) for state in shown["states"]]
    assert names[-4:] == [("reconnecting", 1), ("reconnecting", 2), ("reconnecting", 3),
                          ("interrupted", None)]
    assert (shown["notice"], shown["action"]) == ("output interrupted — resend", "Resend")
    # The kept text is what had arrived: a prefix of the reply, not empty.
    assert shown["answer"] == shown["text"] != ""
    assert reply_text(12, 200).startswith(shown["text"])


# A fake events endpoint that answers what a bad or gone server would.
BAD_BODIES = {
    "malformed": (200, b'event: delta\nid: ub_bad:1\ndata: {"text": "a"\n\n'),
    "unknown-kind": (200, b'event: surprise\nid: ub_bad:1\ndata: {}\n\n'),
    "foreign-id": (200, b'event: delta\nid: ub_other:1\ndata: {"text":"a"}\n\n'),
    "gone": (204, b""),
    "unauthorized": (401, b'{"error": {"message": "no such credential"}}'),
    "unknown": (404, b'{"error": {"message": "unbroken proxy: no stream ub_bad"}}'),
}


# A good body written in pieces cut inside UTF-8 characters and between the CR and LF of a line
# end, with a frame sent twice: the emoji 👩‍💻 (woman, ZWJ, laptop) arrives in two deltas.
SPLIT_BODY = "".join(
    f"event: {kind}\r\nid: ub_split:{seq}\r\ndata: {data}\r\n\r\n" for kind, seq, data in (
        ("delta", 1, '{"text":"a👩","status":"streaming"}'),
        ("delta", 2, '{"text":"\u200d💻 b"}'),
        ("delta", 2, '{"text":"\u200d💻 b"}'),
        ("end", 2, '{"status":"completed","finish_reason":"stop","raw_finish_reason":"stop",'
                   '"error":null,"frames":2,"chars":6}'),
    )).encode()
SPLIT_AT = 7
assert any(SPLIT_BODY[cut - 1:cut + 1] == b"\r\n" for cut in range(SPLIT_AT, len(SPLIT_BODY),
                                                                   SPLIT_AT))


# Parallel tool calls that share index 0 (as Ollama gives them), each continued by its id, then
# a delta with no id (it belongs to the latest call at its index), a repeated frame, and a call
# at another index.
CALL_DELTAS: list[tuple[int, list[dict[str, Any]]]] = [
    (1, [{"index": 0, "id": "call_a", "name": "get_weather", "arguments": '{"city":'}]),
    (2, [{"index": 0, "id": "call_b", "name": "get_weather", "arguments": '{"city":'}]),
    (3, [{"index": 0, "id": "call_a", "arguments": '"Paris"}'}]),
    (4, [{"index": 0, "arguments": '"東京"}'}]),
    (4, [{"index": 0, "arguments": '"東京"}'}]),
    (5, [{"index": 1, "name": "noop", "arguments": "{}"}]),
]
CALLS_BODY = "".join(
    f"event: delta\nid: ub_calls:{seq}\ndata: {json.dumps({'tool_calls': calls})}\n\n"
    for seq, calls in CALL_DELTAS
).encode() + (b'event: end\nid: ub_calls:5\ndata: {"status":"completed","finish_reason":'
              b'"tool_calls","raw_finish_reason":"tool_calls","error":null,"frames":5,'
              b'"chars":0}\n\n')


@contextmanager
def bad_server() -> Iterator[str]:
    async def events(request: Request) -> Response:
        if request.path_params["case"] == "calls":
            return Response(CALLS_BODY, media_type="text/event-stream")
        if request.path_params["case"] == "split":
            async def pieces() -> AsyncIterator[bytes]:
                for start in range(0, len(SPLIT_BODY), SPLIT_AT):
                    yield SPLIT_BODY[start:start + SPLIT_AT]
                    await asyncio.sleep(0.01)

            return StreamingResponse(pieces(), media_type="text/event-stream")
        status, body = BAD_BODIES[request.path_params["case"]]
        return Response(body, status_code=status, media_type="text/event-stream")

    async def page(request: Request) -> Response:
        return HTMLResponse('<!doctype html><body data-ready="1">bad</body>')

    app = Starlette(routes=[Route("/", page), Route("/unbroken.js", create_app_script),
                            Route("/{case}/v1/streams/{stream_id}/events", events)])
    with serve_in_thread(app) as origin:
        yield origin


async def create_app_script(request: Request) -> Response:
    from unbroken.web import script_response

    return await script_response(request)


def test_bad_input_fails_with_its_reason(chromium: str, tmp_path: Path) -> None:  # noqa: F811
    async def scenario(origin: str) -> dict[str, Any]:
        async with chromium_page(chromium, tmp_path / "profile") as page:
            await page.goto(origin + "/")
            got: dict[str, Any] = await page.evaluate("""(async () => {
                const { attach } = await import('/unbroken.js');
                const out = {};
                for (const name of NAMES) {
                    const s = attach('/' + name, 'ub_bad', {retries: 2, backoffMs: 10});
                    await s.done;
                    out[name] = {state: s.state.name, reason: s.state.reason ?? null,
                                 httpStatus: s.state.httpStatus ?? null,
                                 connections: s.connections};
                }
                return out; })()""".replace("NAMES", json.dumps(list(BAD_BODIES))))
            return got

    with bad_server() as origin:
        got = run(scenario(origin))
    assert got == {
        "malformed": {"state": "failed", "httpStatus": None, "connections": 1,
                      "reason": got["malformed"]["reason"]},
        "unknown-kind": {"state": "failed", "httpStatus": None, "connections": 1,
                         "reason": 'unknown event kind "surprise"'},
        "foreign-id": {"state": "failed", "httpStatus": None, "connections": 1,
                       "reason": 'frame id "ub_other:1" is not ub_bad:<seq>'},
        "gone": {"state": "interrupted", "httpStatus": 204, "connections": 1,
                 "reason": "the stream had ended"},
        "unauthorized": {"state": "failed", "httpStatus": 401, "connections": 1,
                         "reason": "no such credential"},
        "unknown": {"state": "failed", "httpStatus": 404, "connections": 1,
                    "reason": "unbroken proxy: no stream ub_bad"},
    }
    assert got["malformed"]["reason"].startswith("malformed frame 1: ")


def test_split_characters_graphemes_and_a_repeated_frame(chromium: str,  # noqa: F811
                                                         tmp_path: Path) -> None:
    async def scenario(origin: str) -> dict[str, Any]:
        async with chromium_page(chromium, tmp_path / "profile") as page:
            await page.goto(origin + "/")
            got: dict[str, Any] = await page.evaluate("""(async () => {
                const { attach } = await import('/unbroken.js');
                const s = attach('/split', 'ub_split', {graphemes: true});
                const visible = [];
                s.addEventListener('change', () => visible.push(s.visibleText));
                await s.done;
                return {state: s.state.name, text: s.text, visible: visible,
                        duplicates: s.duplicates, lastSeq: s.lastSeq}; })()""")
            return got

    with bad_server() as origin:
        got = run(scenario(origin))
    assert (got["state"], got["text"], got["duplicates"], got["lastSeq"]) == (
        "completed", "a👩\u200d💻 b", 1, 2)
    # Never half a character, never half an emoji: 👩 alone is held back until its end came.
    assert got["visible"] == ["", "a", "a👩\u200d💻 ", "a👩\u200d💻 b"]


def test_parallel_calls_sharing_an_index_stay_apart(chromium: str,  # noqa: F811
                                                    tmp_path: Path) -> None:
    async def scenario(origin: str) -> dict[str, Any]:
        async with chromium_page(chromium, tmp_path / "profile") as page:
            await page.goto(origin + "/")
            got: dict[str, Any] = await page.evaluate("""(async () => {
                const { attach } = await import('/unbroken.js');
                const s = attach('/calls', 'ub_calls');
                await s.done;
                return {state: s.state.name, calls: s.toolCalls, duplicates: s.duplicates};
                })()""")
            return got

    with bad_server() as origin:
        got = run(scenario(origin))
    expected = [
        {"index": 0, "id": "call_a", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"index": 0, "id": "call_b", "name": "get_weather", "arguments": '{"city":"東京"}'},
        {"index": 1, "id": None, "name": "noop", "arguments": "{}"},
    ]
    assert got == {"state": "completed", "calls": expected, "duplicates": 1}
    # the Python reader (tool_calls.py) folds the same deltas the same way
    calls = ToolCalls()
    for seq, deltas in dict(CALL_DELTAS).items():  # the repeated frame once, as committed
        for delta in deltas:
            calls.add(ToolCallDelta(seq=seq, **delta))
    assert [{"index": c.index, "id": c.id, "name": c.name, "arguments": c.arguments}
            for c in calls.calls()] == expected


def test_a_page_of_another_origin_uses_the_proxy(chromium: str, mock_server: str,  # noqa: F811
                                                  tmp_path: Path) -> None:
    async def page_app(request: Request) -> Response:
        return HTMLResponse(demo_page())

    async def scenario(page_origin: str, proxy: str) -> dict[str, Any]:
        async with chromium_page(chromium, tmp_path / "profile") as page:
            await page.goto(page_origin + "/?" + urlencode({"proxy": proxy, "key": KEY}))
            await send(page, "seed=13; tokens=10")
            return await ended(page)

    with serve_in_thread(Starlette(routes=[Route("/", page_app)])) as page_origin:
        with demo(mock_server, cors_origins=(page_origin,)) as proxy:
            shown = run(scenario(page_origin, proxy))
    assert (shown["state"], shown["answer"]) == ("completed", reply_text(13, 10))
    assert mock_counts(mock_server)["generations"] == {"/v1/chat/completions": 1}
