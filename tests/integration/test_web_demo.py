"""``unbroken demo --web`` as a user runs it: the page, ``/unbroken.js`` and a stream through the
proxy it starts; and the proxy's own ``/unbroken.js``."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time

import httpx2
import pytest
from tests.integration.test_proxy_support import running_proxy
from tests.normalized_reading import fold_normalized

from unbroken.mock import reply_text
from unbroken.web import script

pytestmark = pytest.mark.integration

START_TIMEOUT_S = 60.0


def test_the_proxy_serves_the_module(mock_server: str) -> None:
    with running_proxy(mock_server) as (proxy, _app):
        response = httpx2.get(proxy + "/unbroken.js", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/javascript; charset=utf-8"
    assert response.content == script()
    assert b"export async function start(" in response.content


def test_demo_web_serves_the_page_and_streams() -> None:
    env = {**os.environ, "COLUMNS": "200", "PYTHONFAULTHANDLER": "1"}
    demo = subprocess.Popen(
        [sys.executable, "-m", "unbroken", "demo", "--web"], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, text=True)
    try:
        assert demo.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        line = ""
        while "open " not in line:
            left = deadline - time.monotonic()
            assert left > 0 and select.select([demo.stdout], [], [], left)[0], line
            line = demo.stdout.readline()
            assert line, "the demo exited before it served"
        match = re.search(r"open (http://127\.0\.0\.1:\d+)/", line)
        assert match, line
        origin = match.group(1)
        page = httpx2.get(origin + "/", timeout=10)
        assert page.status_code == 200
        assert '<div id="announce" class="sr-only" role="status" aria-live="polite">' in page.text
        assert "http" not in page.text.replace("http-equiv", "")  # no external assets
        assert httpx2.get(origin + "/unbroken.js", timeout=10).content == script()
        created = httpx2.post(
            origin + "/v1/chat/completions", timeout=10,
            json={"model": "demo", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": "Bearer sk-demo-page", "unbroken-mock": "seed=3; tokens=5"})
        stream_id = created.headers["unbroken-stream-id"]
        events = httpx2.get(f"{origin}/v1/streams/{stream_id}/events?format=unbroken",
                            headers={"authorization": "Bearer sk-demo-page"}, timeout=10)
        got = fold_normalized(events.content, stream_id)
        assert (got["text"], got["end"]["status"]) == (reply_text(3, 5), "completed")
    finally:
        demo.send_signal(signal.SIGINT)
        try:
            try:
                assert demo.wait(timeout=30) == 0
            except subprocess.TimeoutExpired:
                # Seen once in CI under heavy load: dump every thread's stack (faulthandler on
                # SIGABRT) so the failure says where the shutdown waits.
                demo.send_signal(signal.SIGABRT)
                try:
                    out = demo.communicate(timeout=10)[0]
                except subprocess.TimeoutExpired:
                    demo.kill()
                    out = demo.communicate(timeout=10)[0]
                raise AssertionError("the demo did not stop within 30 s of SIGINT:\n"
                                     + out[-12000:]) from None
        finally:
            if demo.poll() is None:
                demo.kill()
                demo.wait(timeout=10)
            if demo.stdout is not None:
                demo.stdout.close()
