"""``?format=unbroken`` on app streams (the normalized format ``unbroken.js`` reads), and
``unbroken.js`` served by the mounted ``streams.app``."""

from __future__ import annotations

import json

import httpx2
import pytest
from tests.integration.test_server_streams import app_url, start  # noqa: F401  (a fixture)
from tests.normalized_reading import fold_normalized

from unbroken.web import script

pytestmark = pytest.mark.integration

OWNER = {"x-owner": "alice"}


@pytest.mark.parametrize(("kind", "end"), [
    ("str", ("completed", "stop", None)),
    ("events", ("truncated", "length", "length")),
    ("astream", ("truncated", "length", "length")),
])
def test_app_streams_in_the_normalized_format(app_url: str, kind: str,  # noqa: F811
                                              end: tuple[str, str, str | None]) -> None:
    stream_id = start(app_url, kind=kind, n=6, interval=0.02)["stream_id"]
    events = f"{app_url}/streams/{stream_id}/events"
    whole = httpx2.get(events, params={"format": "unbroken"}, headers=OWNER, timeout=20)
    assert whole.status_code == 200
    assert whole.headers["content-type"].startswith("text/event-stream")
    folded = fold_normalized(whole.content, stream_id)
    plain = httpx2.get(f"{app_url}/streams/{stream_id}", headers=OWNER, timeout=10).json()
    assert folded["text"] == plain["text"] != ""
    assert (folded["end"]["status"], folded["end"]["finish_reason"],
            folded["end"]["raw_finish_reason"]) == end
    assert folded["end"]["chars"] == len(plain["text"])
    # A resume after the third delta gets exactly the rest, then the end.
    third = folded["seqs"][2]
    rest = httpx2.get(events, params={"format": "unbroken"}, timeout=20,
                      headers={**OWNER, "last-event-id": f"{stream_id}:{third}"})
    resumed = fold_normalized(rest.content, stream_id)
    assert resumed["seqs"] == folded["seqs"][3:]
    assert resumed["end"] == folded["end"]
    if kind == "str":
        assert folded["text"] == "".join(f"t{i}\r\n✓ " for i in range(1, 7))
        assert folded["seqs"] == [1, 2, 3, 4, 5, 6]
    # The provider format (the app's own frames) is still the default.
    assert b"event: text" in httpx2.get(events, headers=OWNER, timeout=20).content


def test_bad_format_and_the_browser_module(app_url: str) -> None:  # noqa: F811
    stream_id = start(app_url, kind="str", n=2)["stream_id"]
    bad = httpx2.get(f"{app_url}/streams/{stream_id}/events", params={"format": "xml"},
                     headers=OWNER, timeout=10)
    assert bad.status_code == 400
    assert "unknown format 'xml'" in bad.json()["error"]["message"]
    module = httpx2.get(f"{app_url}/streams/unbroken.js", timeout=10)
    assert module.status_code == 200
    assert module.headers["content-type"].startswith("text/javascript")
    assert module.content == script()
    stranger = httpx2.get(f"{app_url}/streams/{stream_id}/events",
                          params={"format": "unbroken"}, timeout=10)
    assert stranger.status_code == 404
    assert json.loads(stranger.content)["error"]["type"] == "not_found"
