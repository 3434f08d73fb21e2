"""``examples/chat_app.py`` (FastAPI + the OpenAI SDK + ``unbroken.server``) under a real uvicorn,
its model the mock: an answer read again after a "reload" is the same, and Stop cancels it."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx2
import pytest
from tests.servers import serve_in_thread

from unbroken.framing import ServerSentEvent, SSEDecoder

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "chat_app.py"


@pytest.fixture
def chat_module(tmp_path: Path, mock_server: str,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.setenv("UNBROKEN_STORE", f"sqlite:///{tmp_path / 'chat.db'}")
    monkeypatch.setenv("MOCK_URL", mock_server)
    spec = importlib.util.spec_from_file_location("chat_app_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["chat_app_example"] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["chat_app_example"]


def read(client: httpx2.Client, stream_id: str, limit: int | None) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events: list[ServerSentEvent] = []
    with client.stream("GET", f"/chat/{stream_id}/events") as response:
        assert response.status_code == 200
        for chunk in response.iter_raw():
            events += decoder.receive_data(chunk)
            if limit is not None and len(events) >= limit:
                return events[:limit]
    return events + decoder.receive_eof()


def test_the_answer_survives_a_reload_and_stop_cancels_it(chat_module: ModuleType) -> None:
    with serve_in_thread(chat_module.app) as url, httpx2.Client(base_url=url,
                                                                timeout=30) as browser:
        page = browser.get("/")
        assert page.status_code == 200 and "EventSource" in page.text
        assert "chat_user" in browser.cookies
        started = browser.post("/chat", json={"message": "hi", "request_id": "r-1"})
        assert started.status_code == 200
        stream_id = started.json()["stream_id"]
        again = browser.post("/chat", json={"message": "hi", "request_id": "r-1"})
        assert again.json()["stream_id"] == stream_id  # a double click: one generation
        before = read(browser, stream_id, limit=4)
        reloaded = read(browser, stream_id, limit=6)  # the page reloaded: from the start
        assert [(e.event, e.data, e.id) for e in reloaded[:4]] == [
            (e.event, e.data, e.id) for e in before]
        assert all(event.event == "text" for event in reloaded)
        with httpx2.Client(base_url=url, timeout=10) as stranger:
            assert stranger.get(f"/chat/{stream_id}/events").status_code == 404
            assert stranger.post(f"/chat/{stream_id}/cancel").status_code == 404
        stopped = browser.post(f"/chat/{stream_id}/cancel")
        assert stopped.status_code == 200 and stopped.json()["status"] == "cancelled"
        whole = read(browser, stream_id, limit=None)
    assert whole[-1].event == "end"
    assert json.loads(whole[-1].data)["status"] == "cancelled"
    text = "".join(json.loads(event.data) for event in whole[:-1])
    assert text == stopped.json()["text"] and text.startswith(
        "".join(json.loads(event.data) for event in reloaded))
