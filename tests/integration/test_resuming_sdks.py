"""The official SDKs and two frameworks over ``http_client()``: a cut between the app and the
proxy is invisible to them.

Real openai (chat and responses), anthropic and google-genai clients, LangChain's ChatOpenAI and
pydantic-ai's OpenAI and Anthropic models, each given an ``http_client()`` /
``async_http_client()`` and pointed at a real proxy through a TCP fault relay: the exact text, no
exception, one generation at the mock, for every break. Without the transport the same break
makes them raise. The SDK's own retry after a cut before the response head attaches to the
first attempt's stream by its Idempotency-Key: one generation (two without the transport).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import anyio
import httpx2
import openai
import pytest
from google import genai
from google.genai import types as genai_types
from langchain_openai import ChatOpenAI
from pydantic_ai import Agent
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.openai import OpenAIProvider
from tests.fault_relay import Fault
from tests.integration.resuming_support import (
    BREAKS,
    DEADLINES,
    FAULTS,
    RETRY,
    SCENARIO,
    SEED,
    TOKENS,
    generations,
    proxy_url,
    relay_to,
)
from tests.integration.test_proxy_support import KEY

from unbroken import (
    async_http_client,
    from_anthropic,
    from_gemini,
    from_openai,
    http_client,
)
from unbroken.finish import FinishReason, Status
from unbroken.mock import reply_text
from unbroken.sdk import TrackedStream

pytestmark = pytest.mark.integration
__all__ = ["proxy_url"]  # a fixture, used by name

MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]
MOCK = {"Unbroken-Mock": SCENARIO}
TEXT = reply_text(SEED, TOKENS)


def sync_client() -> httpx2.Client:
    return http_client(retry=RETRY, deadlines=DEADLINES, timeout=10)


def async_client() -> httpx2.AsyncClient:
    return async_http_client(retry=RETRY, deadlines=DEADLINES, timeout=10)


# -- one function per SDK: the text it yields, over the given httpx2 client ------------------


def openai_chat(base: str, client: httpx2.Client, retries: int = 0) -> str:
    sdk = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=retries,
                        http_client=client)
    stream = sdk.chat.completions.create(model="m", messages=MESSAGES, stream=True,
                                         extra_headers=MOCK)
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def openai_responses(base: str, client: httpx2.Client, retries: int = 0) -> str:
    sdk = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=retries,
                        http_client=client)
    stream = sdk.responses.create(model="m", input="hi", stream=True, extra_headers=MOCK)
    return "".join(e.delta for e in stream if e.type == "response.output_text.delta")


def anthropic_messages(base: str, client: httpx2.Client, retries: int = 0) -> str:
    sdk = anthropic.Anthropic(base_url=base, api_key=KEY, max_retries=retries,
                              http_client=client)
    stream = sdk.messages.create(model="m", max_tokens=100, messages=MESSAGES, stream=True,
                                 extra_headers=MOCK)
    return "".join(e.delta.text for e in stream
                   if e.type == "content_block_delta" and e.delta.type == "text_delta")


def gemini_options(base: str, **clients: Any) -> genai_types.HttpOptions:
    return genai_types.HttpOptions(base_url=base, headers=MOCK, **clients,
                                   retry_options=genai_types.HttpRetryOptions(attempts=1))


def gemini_stream(base: str, client: httpx2.Client, retries: int = 0) -> str:
    sdk = genai.Client(api_key=KEY, http_options=gemini_options(base, httpx_client=client))
    return "".join(c.text or "" for c in sdk.models.generate_content_stream(
        model="gemini-m", contents="hi"))


def langchain_openai(base: str, client: httpx2.Client, retries: int = 0) -> str:
    model = ChatOpenAI(model="m", base_url=base + "/v1", api_key=KEY,  # type: ignore[arg-type]
                       max_retries=retries, http_client=client, default_headers=MOCK)
    return "".join(str(chunk.content) for chunk in model.stream("hi"))


async def openai_chat_async(base: str, client: httpx2.AsyncClient) -> str:
    sdk = openai.AsyncOpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0,
                             http_client=client)
    stream = await sdk.chat.completions.create(model="m", messages=MESSAGES, stream=True,
                                               extra_headers=MOCK)
    return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])


async def openai_responses_async(base: str, client: httpx2.AsyncClient) -> str:
    sdk = openai.AsyncOpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0,
                             http_client=client)
    stream = await sdk.responses.create(model="m", input="hi", stream=True, extra_headers=MOCK)
    return "".join([e.delta async for e in stream if e.type == "response.output_text.delta"])


async def anthropic_async(base: str, client: httpx2.AsyncClient) -> str:
    sdk = anthropic.AsyncAnthropic(base_url=base, api_key=KEY, max_retries=0,
                                   http_client=client)
    stream = await sdk.messages.create(model="m", max_tokens=100, messages=MESSAGES,
                                       stream=True, extra_headers=MOCK)
    return "".join([e.delta.text async for e in stream
                    if e.type == "content_block_delta" and e.delta.type == "text_delta"])


async def gemini_async(base: str, client: httpx2.AsyncClient) -> str:
    sdk = genai.Client(api_key=KEY, http_options=gemini_options(base, httpx_async_client=client))
    stream = await sdk.aio.models.generate_content_stream(model="gemini-m", contents="hi")
    return "".join([c.text or "" async for c in stream])


async def langchain_async(base: str, client: httpx2.AsyncClient) -> str:
    model = ChatOpenAI(model="m", base_url=base + "/v1", api_key=KEY,  # type: ignore[arg-type]
                       max_retries=0, http_async_client=client, default_headers=MOCK)
    return "".join([str(chunk.content) async for chunk in model.astream("hi")])


async def pydantic_ai_run(model: Any) -> str:
    agent = Agent(model)
    async with agent.run_stream("hi") as result:
        return "".join([delta async for delta in result.stream_text(delta=True)])


async def pydantic_ai_openai(base: str, client: httpx2.AsyncClient) -> str:
    provider = OpenAIProvider(base_url=base + "/v1", api_key=KEY, http_client=client)
    return await pydantic_ai_run(OpenAIChatModel("m", provider=provider))


async def pydantic_ai_responses(base: str, client: httpx2.AsyncClient) -> str:
    provider = OpenAIProvider(base_url=base + "/v1", api_key=KEY, http_client=client)
    return await pydantic_ai_run(OpenAIResponsesModel("m", provider=provider))


async def pydantic_ai_anthropic(base: str, client: httpx2.AsyncClient) -> str:
    provider = AnthropicProvider(base_url=base, api_key=KEY, http_client=client)
    return await pydantic_ai_run(AnthropicModel("m", provider=provider))


SYNC: dict[str, Callable[..., str]] = {
    "openai-chat": openai_chat,
    "openai-responses": openai_responses,
    "anthropic": anthropic_messages,
    "gemini": gemini_stream,
    "langchain-openai": langchain_openai,
}
ASYNC: dict[str, Callable[[str, httpx2.AsyncClient], Awaitable[str]]] = {
    "openai-chat": openai_chat_async,
    "openai-responses": openai_responses_async,
    "anthropic": anthropic_async,
    "gemini": gemini_async,
    "langchain-openai": langchain_async,
    "pydantic-ai-openai": pydantic_ai_openai,
    "pydantic-ai-responses": pydantic_ai_responses,
    "pydantic-ai-anthropic": pydantic_ai_anthropic,
}


def _with_mock_headers(client: httpx2.AsyncClient) -> httpx2.AsyncClient:
    client.headers.update(MOCK)  # pydantic-ai sends no extra headers of its own choosing
    return client


@pytest.mark.parametrize("fault", BREAKS)
@pytest.mark.parametrize("sdk", list(SYNC))
def test_a_sync_sdk_reads_the_exact_text_across_a_break(
    proxy_url: str, mock_server: str, sdk: str, fault: str
) -> None:
    with relay_to(proxy_url, FAULTS[fault]) as relay, sync_client() as client:
        text = SYNC[sdk](relay.url, client)
        assert relay.stats().connections == 2  # the POST, one resume
    assert text == TEXT
    assert generations(mock_server) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("fault", BREAKS)
@pytest.mark.parametrize("sdk", list(ASYNC))
async def test_an_async_sdk_reads_the_exact_text_across_a_break(
    proxy_url: str, mock_server: str, sdk: str, fault: str
) -> None:
    with relay_to(proxy_url, FAULTS[fault]) as relay:
        async with _with_mock_headers(async_client()) as client:
            with anyio.fail_after(30):
                text = await ASYNC[sdk](relay.url, client)
        assert relay.stats().connections == 2
    assert text == TEXT
    assert generations(mock_server) == 1


@pytest.mark.parametrize("sdk", list(SYNC))
def test_without_the_transport_the_sdk_raises_on_the_break(
    proxy_url: str, mock_server: str, sdk: str
) -> None:
    with relay_to(proxy_url, FAULTS["reset-mid-frame"]) as relay, httpx2.Client(
        timeout=10
    ) as client:
        with pytest.raises(Exception) as raised:
            SYNC[sdk](relay.url, client)
        assert relay.stats().connections == 1
    # Each SDK lets httpx2's error through or wraps it as its connection error.
    assert isinstance(raised.value, httpx2.TransportError | openai.APIConnectionError
                      | anthropic.APIConnectionError) or isinstance(
        raised.value.__cause__, httpx2.TransportError), repr(raised.value)
    assert generations(mock_server) == 1


@pytest.mark.parametrize("sdk", ["openai-chat", "openai-responses", "anthropic",
                                 "langchain-openai"])
def test_the_sdks_own_retry_after_a_cut_before_the_head_generates_once(
    proxy_url: str, mock_server: str, sdk: str
) -> None:
    cut = [Fault.reset(after=20)]  # inside the response head
    with relay_to(proxy_url, cut) as relay, sync_client() as client:
        assert SYNC[sdk](relay.url, client, retries=2) == TEXT
        assert relay.stats().connections == 2  # the POST, the SDK's retry
    assert generations(mock_server) == 1


@pytest.mark.parametrize("sdk", ["openai-chat", "anthropic"])
def test_without_the_transport_the_sdks_retry_generates_again(
    proxy_url: str, mock_server: str, sdk: str
) -> None:
    cut = [Fault.reset(after=20)]
    with relay_to(proxy_url, cut) as relay, httpx2.Client(timeout=10) as client:
        assert SYNC[sdk](relay.url, client, retries=2) == TEXT
        assert relay.stats().connections == 2
    assert generations(mock_server) == 2


def test_a_deliberate_second_call_is_a_second_generation(
    proxy_url: str, mock_server: str
) -> None:
    with sync_client() as client:
        assert openai_chat(proxy_url, client) == TEXT
        assert openai_chat(proxy_url, client) == TEXT
    assert generations(mock_server) == 2


def tracked_openai(base: str, client: httpx2.Client) -> TrackedStream[Any]:
    sdk = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0, http_client=client)
    return from_openai(sdk.chat.completions.create(model="m", messages=MESSAGES, stream=True,
                                                   extra_headers=MOCK))


def tracked_anthropic(base: str, client: httpx2.Client) -> TrackedStream[Any]:
    sdk = anthropic.Anthropic(base_url=base, api_key=KEY, max_retries=0, http_client=client)
    return from_anthropic(sdk.messages.create(model="m", max_tokens=100, messages=MESSAGES,
                                              stream=True, extra_headers=MOCK))


def tracked_gemini(base: str, client: httpx2.Client) -> TrackedStream[Any]:
    sdk = genai.Client(api_key=KEY, http_options=gemini_options(base, httpx_client=client))
    return from_gemini(sdk.models.generate_content_stream(model="gemini-m", contents="hi"))


TRACKED = {"openai-chat": tracked_openai, "anthropic": tracked_anthropic,
           "gemini": tracked_gemini}


@pytest.mark.parametrize("fault", ["reset-mid-frame", "stall"])
@pytest.mark.parametrize("sdk", list(TRACKED))
def test_the_sdk_wrappers_over_the_client_end_completed(
    proxy_url: str, mock_server: str, sdk: str, fault: str
) -> None:
    with relay_to(proxy_url, FAULTS[fault]) as relay, sync_client() as client:
        tracked = TRACKED[sdk](relay.url, client)
        received = list(tracked)
        assert relay.stats().connections == 2
    assert len(received) > 0
    message = tracked.message
    assert (message.status, message.finish_reason, message.text) == (
        Status.COMPLETED, FinishReason.STOP, TEXT)
    assert message.duplicates == 0
    assert generations(mock_server) == 1


@pytest.mark.anyio
async def test_the_async_sdks_own_retry_generates_once(proxy_url: str, mock_server: str) -> None:
    with relay_to(proxy_url, [Fault.reset(after=20)]) as relay:
        async with async_client() as client:
            sdk = openai.AsyncOpenAI(base_url=relay.url + "/v1", api_key=KEY, max_retries=2,
                                     http_client=client)
            with anyio.fail_after(30):
                stream = await sdk.chat.completions.create(
                    model="m", messages=MESSAGES, stream=True, extra_headers=MOCK)
                text = "".join([c.choices[0].delta.content or "" async for c in stream
                                if c.choices])
        assert relay.stats().connections == 2
    assert text == TEXT
    assert generations(mock_server) == 1
