"""A Gemini POST through the proxy carries no ids (google-genai parses every non-``data:`` line
as JSON), so an unnumbered error frame there is not by itself the proxy's notice. The proxy marks
its notice with a ``google.rpc.ErrorInfo`` (domain ``unbroken``, reason ``STREAM_INCOMPLETE``,
the mark's fields as metadata): google-genai raises with that detail in hand, and unbroken's
client reads it as the end of this response (interrupted, resumable: test_proxy_lifecycle.py)."""

from __future__ import annotations

import json

import httpx2
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types
from tests.integration.test_proxy_lifecycle import FailingJournal
from tests.integration.test_proxy_support import (
    CALLS,
    KEY,
    frames_of,
    message_of,
    proxy_config,
)
from tests.servers import serve_in_thread

from unbroken.finish import Status
from unbroken.proxy import create_app

pytestmark = pytest.mark.integration

SCENARIO = "seed=1; tokens=10; delay_ms=20"  # one frame per upstream read: 3 are journaled
ERROR_INFO = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "STREAM_INCOMPLETE",
              "domain": "unbroken", "metadata": {"code": "stream_incomplete",
                                                 "status": "streaming", "resumable": "true"}}


def test_the_gemini_notice_on_the_wire(mock_server: str) -> None:
    call = CALLS["gemini"]
    app = create_app(proxy_config(mock_server), journal=FailingJournal())
    with serve_in_thread(app) as proxy:
        body = httpx2.post(proxy + call.path, json=call.body, timeout=10,
                           headers=call.headers(SCENARIO)).content
    frames = frames_of("gemini", body)
    assert [frame.id for frame in frames] == [""] * 4  # no ids on a Gemini POST
    assert json.loads(frames[-1].data)["error"]["details"] == [ERROR_INFO]
    # The mark tells, with or without the response's Unbroken-Stream-Id: not a provider error.
    read = message_of("gemini", body)
    assert (read.status, read.error, read.text) == (
        Status.INTERRUPTED, None, call.text_after(1, 10, 3))


def test_google_genai_raises_on_the_notice_with_its_error_info(mock_server: str) -> None:
    call = CALLS["gemini"]
    app = create_app(proxy_config(mock_server), journal=FailingJournal())
    with serve_in_thread(app) as proxy:
        options = genai_types.HttpOptions(
            base_url=proxy, headers={"Unbroken-Mock": SCENARIO},
            retry_options=genai_types.HttpRetryOptions(attempts=1))
        text: list[str] = []
        with genai.Client(api_key=KEY, http_options=options) as client, pytest.raises(
            genai_errors.APIError
        ) as raised:
            for chunk in client.models.generate_content_stream(model="gemini-m", contents="hi"):
                text.append(chunk.text or "")
    assert (raised.value.code, raised.value.status) == (500, "INTERNAL")
    assert raised.value.details["error"]["details"] == [ERROR_INFO]
    assert "".join(text) == call.text_after(1, 10, 3)
