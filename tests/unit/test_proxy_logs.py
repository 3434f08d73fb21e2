"""No secret reaches a log line: Gemini's key= and EventSource's token= are redacted."""

from __future__ import annotations

import logging

import pytest

from unbroken.streams.logs import RedactSecrets, install_redaction, redact


def test_redact_secret_query_parameters() -> None:
    assert redact("/v1beta/models/g:streamGenerateContent?alt=sse&key=AIza-secret") == (
        "/v1beta/models/g:streamGenerateContent?alt=sse&key=REDACTED"
    )
    assert redact("/v1/streams/ub_1/events?token=abc-DEF_1&after=3") == (
        "/v1/streams/ub_1/events?token=REDACTED&after=3"
    )
    assert redact("/x?KEY=a&monkey=b&api_key=c") == "/x?KEY=REDACTED&monkey=b&api_key=REDACTED"
    assert redact("/v1/chat/completions") == "/v1/chat/completions"


def test_uvicorn_access_record_is_redacted(caplog: pytest.LogCaptureFixture) -> None:
    install_redaction()
    install_redaction()  # idempotent
    access = logging.getLogger("uvicorn.access")
    assert sum(isinstance(f, RedactSecrets) for f in access.filters) == 1
    with caplog.at_level(logging.INFO, logger="uvicorn.access"):
        access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "POST",
                    "/v1beta/models/g:streamGenerateContent?alt=sse&key=sk-live-1", "1.1", 200)
    assert caplog.messages == [
        '127.0.0.1:5 - "POST /v1beta/models/g:streamGenerateContent?alt=sse&key=REDACTED '
        'HTTP/1.1" 200'
    ]
    assert "sk-live-1" not in caplog.text
