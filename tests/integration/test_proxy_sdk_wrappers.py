"""The SDK wrappers (``unbroken.from_openai`` ...) over official SDKs pointed at the proxy.

The SDK raises at the proxy's own frame (that is why it is the dialect's error shape), and the
wrapper reads the proxy's mark: ``interrupted`` with the exact prefix, as the proxy journaled,
with ``ProxyInterrupted``; a provider's own error in the stream stays ``failed``. Sync and async.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, TypeVar

import anthropic
import ollama
import openai
import pytest
from google import genai
from google.genai import types as genai_types
from tests.integration.test_proxy_sdks import SDK_ERRORS, SDK_PATHS
from tests.integration.test_proxy_support import CALLS, KEY, mock_counts, running_proxy

import unbroken
from unbroken.errors import ProviderError, ProxyInterrupted
from unbroken.finish import Status

pytestmark = pytest.mark.integration
T = TypeVar("T")

SEED, TOKENS = 9, 10
MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]
# The SDK clients of the stream being read, closed once it was (google-genai also closes its
# HTTP client when the Client object is collected, so it must be held meanwhile).
OPEN: list[Any] = []


@pytest.fixture(scope="module")
def proxy(mock_server_session: str) -> Iterator[str]:
    with running_proxy(mock_server_session) as (base_url, _app):
        yield base_url


def sync_tracked(dialect: str, base: str, scenario: str) -> Any:
    """The wrapped SDK stream; the caller iterates it (and closes the client by the stream)."""
    mock = {"Unbroken-Mock": scenario}
    if dialect in ("openai-chat", "openai-responses"):
        client = opened(openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0))
        if dialect == "openai-chat":
            return unbroken.from_openai(client.chat.completions.create(
                model="m", messages=MESSAGES, stream=True, extra_headers=mock))
        return unbroken.from_openai(client.responses.create(
            model="m", input="hi", stream=True, extra_headers=mock))
    if dialect == "anthropic":
        claude = opened(anthropic.Anthropic(base_url=base, api_key=KEY, max_retries=0))
        return unbroken.from_anthropic(claude.messages.create(
            model="m", max_tokens=100, messages=MESSAGES, stream=True, extra_headers=mock))
    if dialect == "gemini":
        gemini = opened(genai.Client(api_key=KEY, http_options=gemini_options(base, scenario)))
        return unbroken.from_gemini(gemini.models.generate_content_stream(
            model="gemini-m", contents="hi"))
    local = opened(ollama.Client(host=base,
                                 headers={**mock, "Authorization": f"Bearer {KEY}"}))
    return unbroken.from_ollama(local.chat(model="m", messages=MESSAGES, stream=True))


async def async_tracked(dialect: str, base: str, scenario: str) -> Any:
    mock = {"Unbroken-Mock": scenario}
    if dialect in ("openai-chat", "openai-responses"):
        client = opened(openai.AsyncOpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0))
        if dialect == "openai-chat":
            return unbroken.from_openai(await client.chat.completions.create(
                model="m", messages=MESSAGES, stream=True, extra_headers=mock))
        return unbroken.from_openai(await client.responses.create(
            model="m", input="hi", stream=True, extra_headers=mock))
    if dialect == "anthropic":
        claude = opened(anthropic.AsyncAnthropic(base_url=base, api_key=KEY, max_retries=0))
        return unbroken.from_anthropic(await claude.messages.create(
            model="m", max_tokens=100, messages=MESSAGES, stream=True, extra_headers=mock))
    if dialect == "gemini":
        gemini = opened(genai.Client(api_key=KEY, http_options=gemini_options(base, scenario)))
        return unbroken.from_gemini(await gemini.aio.models.generate_content_stream(
            model="gemini-m", contents="hi"))
    local = opened(ollama.AsyncClient(host=base,
                                      headers={**mock, "Authorization": f"Bearer {KEY}"}))
    return unbroken.from_ollama(await local.chat(model="m", messages=MESSAGES, stream=True))


def opened(client: T) -> T:
    OPEN.append(client)
    return client


async def close_all() -> None:
    while OPEN:
        client = OPEN.pop()
        if isinstance(client, genai.Client):
            await client.aio.aclose()
            client.close()
        elif asyncio.iscoroutinefunction(client.close):
            await client.close()
        else:
            client.close()


def gemini_options(base: str, scenario: str) -> genai_types.HttpOptions:
    return genai_types.HttpOptions(base_url=base, headers={"Unbroken-Mock": scenario},
                                   retry_options=genai_types.HttpRetryOptions(attempts=1))


def consume(flavour: str, dialect: str, base: str, scenario: str) -> tuple[Any, Any]:
    """Iterate the wrapped stream to its end: the wrapper (for its message) and what the SDK
    raised, if anything."""
    if flavour == "sync":
        tracked = sync_tracked(dialect, base, scenario)
        try:
            with tracked:
                for _ in tracked:
                    pass
        except Exception as exc:
            return tracked, exc
        finally:
            asyncio.run(close_all())
        return tracked, None

    async def main() -> tuple[Any, Any]:
        tracked = await async_tracked(dialect, base, scenario)
        try:
            async with tracked:
                async for _ in tracked:
                    pass
        except Exception as exc:
            return tracked, exc
        finally:
            await close_all()
        return tracked, None

    return asyncio.run(main())


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("dialect", list(CALLS))
def test_the_proxys_frame_reads_as_interrupted_with_the_exact_prefix(
    proxy: str, mock_server: str, dialect: str, flavour: str
) -> None:
    call = CALLS[dialect]
    taken = call.first_text + 3
    tracked, raised = consume(flavour, dialect, proxy,
                              f"seed={SEED}; tokens={TOKENS}; drop_after={taken}")
    assert isinstance(raised, SDK_ERRORS[dialect])  # the SDK still raises at the proxy's frame
    message = tracked.message
    assert (message.status, message.text, message.finish_reason) == (
        Status.INTERRUPTED, call.text_after(SEED, TOKENS, taken), None)
    assert len(message.text) > 0
    error = message.error
    assert isinstance(error, ProxyInterrupted)
    assert (error.code, error.status) == ("upstream_interrupted", "interrupted")
    assert str(error).startswith("unbroken proxy: the upstream stream broke before it finished")
    assert [w.code for w in message.warnings if w.code == "proxy_end"] == ["proxy_end"]
    assert mock_counts(mock_server)["generations"] == {SDK_PATHS[dialect]: 1}


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("dialect", list(CALLS))
def test_a_providers_own_error_through_the_proxy_stays_failed(
    proxy: str, mock_server: str, dialect: str, flavour: str
) -> None:
    call = CALLS[dialect]
    error_at = call.first_text + 2  # two text deltas, then the provider's error event
    tracked, raised = consume(flavour, dialect, proxy,
                              f"seed={SEED}; tokens={TOKENS}; error_at={error_at}")
    # The OpenAI SDK yields a Responses error event without a nested error object quietly.
    assert raised is None if dialect == "openai-responses" else isinstance(
        raised, SDK_ERRORS[dialect])
    message = tracked.message
    assert (message.status, message.text) == (
        Status.FAILED, call.text_after(SEED, TOKENS, error_at - 1))
    assert isinstance(message.error, ProviderError)
    assert mock_counts(mock_server)["generations"] == {SDK_PATHS[dialect]: 1}
