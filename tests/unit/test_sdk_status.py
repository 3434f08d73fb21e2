"""``status_error``: an SDK exception that reports a final non-2xx status becomes the same
``UpstreamStatusError`` ``unbroken.stream`` ends with; an error event inside a 200 stream, a
transport failure or anything else is not one."""

from __future__ import annotations

import anthropic
import httpx2
import ollama
import openai
import pytest
from google.genai import errors as genai_errors

from unbroken.errors import UpstreamStatusError
from unbroken.sdk.tracked import status_error

REQUEST = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")


def response(status: int, headers: dict[str, str] | None = None) -> httpx2.Response:
    return httpx2.Response(status, headers=headers, request=REQUEST)


def test_openai_429_with_retry_after_ms() -> None:
    body = {"message": "slow down", "type": "rate_limit_error"}
    exc = openai.RateLimitError("slow down", response=response(429, {"retry-after-ms": "1500"}),
                                body=body)
    refused = status_error(exc)
    assert isinstance(refused, UpstreamStatusError)
    assert (refused.status, refused.body, refused.retry_after, refused.retryable) == (
        429, '{"message":"slow down","type":"rate_limit_error"}', 1.5, True)
    assert refused.__cause__ is exc


def test_anthropic_400_is_not_retryable_and_keeps_retry_after_seconds() -> None:
    exc = anthropic.BadRequestError("bad", response=response(400, {"retry-after": "7"}),
                                    body={"type": "error"})
    refused = status_error(exc)
    assert isinstance(refused, UpstreamStatusError)
    assert (refused.status, refused.retry_after, refused.retryable) == (400, 7.0, False)


def test_an_error_event_inside_a_200_stream_is_the_providers_not_a_status() -> None:
    # anthropic raises an in-stream error event as APIStatusError with the 200 response.
    exc = anthropic.APIStatusError("overloaded", response=response(200),
                                   body={"type": "error", "error": {"type": "overloaded_error"}})
    assert status_error(exc) is None
    # ollama: an error line inside the stream has status_code -1.
    assert status_error(ollama.ResponseError("model runner crashed")) is None
    # google-genai keeps the response; an in-stream error came with a 200.
    genai_error = genai_errors.ServerError(500, {"error": {"code": 500}}, response(200))
    assert status_error(genai_error) is None


@pytest.mark.parametrize("exc", [
    httpx2.ReadError("connection reset"),
    ValueError("not JSON"),
    openai.APIError("in-stream", REQUEST, body={"message": "x"}),
])
def test_other_failures_are_not_statuses(exc: Exception) -> None:
    assert status_error(exc) is None


def test_google_genai_status_error_body_is_its_details() -> None:
    exc = genai_errors.ClientError(
        404, {"error": {"code": 404, "message": "no such model", "status": "NOT_FOUND"}},
        response(404))
    refused = status_error(exc)
    assert isinstance(refused, UpstreamStatusError)
    assert (refused.status, refused.body, refused.retryable) == (
        404, '{"error":{"code":404,"message":"no such model","status":"NOT_FOUND"}}', False)
