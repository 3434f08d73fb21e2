"""A real headless Chromium driven over the DevTools protocol (``websockets``), for page tests.

``chromium_page(chromium, profile)`` starts the browser with ``--remote-debugging-port=0`` (the
port it chose is in ``DevToolsActivePort`` in the profile), opens one tab, and yields a ``Page``
whose calls each have a bound wait. Network conditions (offline, online) are Chromium's own
emulation. The browser runs in its own process group, killed at the end.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.integration.test_browser_eventsource import CHROMIUM_FLAGS
from websockets.asyncio.client import ClientConnection, connect

CALL_TIMEOUT_S = 30.0
START_TIMEOUT_S = 60.0


class PageError(AssertionError):
    """The page threw, or a wait ran out (with what the page showed then)."""


class Page:
    def __init__(self, socket: ClientConnection, session: str) -> None:
        self._socket = socket
        self._session = session
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for raw in self._socket:
            message = json.loads(raw)
            future = self._waiting.pop(message.get("id", -1), None)
            if future is not None and not future.done():
                future.set_result(message)

    async def call(self, method: str, params: dict[str, Any] | None = None, *,
                   session: bool = True) -> dict[str, Any]:
        number = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[number] = future
        message: dict[str, Any] = {"id": number, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        await self._socket.send(json.dumps(message))
        answer = await asyncio.wait_for(future, CALL_TIMEOUT_S)
        if "error" in answer:
            raise PageError(f"{method}: {answer['error']}")
        result: dict[str, Any] = answer["result"]
        return result

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", {
            "expression": expression, "awaitPromise": True, "returnByValue": True})
        if "exceptionDetails" in result:
            raise PageError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout: float, what: str = "") -> Any:
        """Poll ``expression`` until it is truthy (every 50 ms, at most ``timeout`` s)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if loop.time() > deadline:
                shown = await self.evaluate(
                    "JSON.stringify({badge: document.getElementById('badge')?.dataset.state, "
                    "notice: document.getElementById('notice')?.textContent, "
                    "meta: document.getElementById('meta')?.textContent})")
                raise PageError(f"waited {timeout} s for {what or expression}; page: {shown}")
            await asyncio.sleep(0.05)

    async def goto(self, url: str) -> None:
        await self.call("Page.navigate", {"url": url})
        await self.wait_for("document.body && document.body.dataset.ready === '1'", 30,
                            "the page to load")

    async def reload(self) -> None:
        await self.evaluate("delete document.body.dataset.ready; location.reload(); 1")
        await asyncio.sleep(0.1)
        await self.wait_for("document.body && document.body.dataset.ready === '1'", 30,
                            "the page to load again")

    async def offline(self, offline: bool) -> None:
        await self.call("Network.emulateNetworkConditions", {
            "offline": offline, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})

    async def screenshot(self, path: Path) -> None:
        shot = await self.call("Page.captureScreenshot", {"format": "png"})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


async def _debugger_url(profile: Path, browser: subprocess.Popen[bytes]) -> str:
    active = profile / "DevToolsActivePort"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + START_TIMEOUT_S
    while not active.exists() or len(active.read_text().splitlines()) < 2:
        if browser.poll() is not None or loop.time() > deadline:
            raise PageError(f"chromium did not open its DevTools port (exit {browser.poll()})")
        await asyncio.sleep(0.05)
    port, path = active.read_text().splitlines()[:2]
    return f"ws://127.0.0.1:{port}{path}"


@contextlib.asynccontextmanager
async def chromium_page(chromium: str, profile: Path) -> AsyncIterator[Page]:
    log = (profile.parent / "chromium.log").open("wb")
    browser = subprocess.Popen(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
         "--window-size=900,700", "about:blank"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = await _debugger_url(profile, browser)
        async with connect(url, max_size=64 * 2**20, open_timeout=CALL_TIMEOUT_S) as socket:
            page = Page(socket, "")
            target = await page.call("Target.createTarget", {"url": "about:blank"},
                                     session=False)
            attached = await page.call("Target.attachToTarget", {
                "targetId": target["targetId"], "flatten": True}, session=False)
            page._session = attached["sessionId"]
            for domain in ("Page", "Runtime", "Network"):
                await page.call(f"{domain}.enable")
            try:
                yield page
            finally:
                await page.close()
    finally:
        os.killpg(browser.pid, signal.SIGKILL)
        browser.wait(timeout=10)
        log.close()
