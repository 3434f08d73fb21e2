"""The official SDKs, unchanged, with their base URL pointed at the proxy.

A normal stream gives what the mock gives directly; an upstream that breaks mid-stream makes the
SDK raise (the proxy's last frame is the dialect's error format) and leaves the stream
``interrupted`` with its prefix kept; the proxy's keep-alives do not upset any SDK.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import ollama
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types
from tests.integration.test_proxy_support import (
    CALLS,
    KEY,
    mock_counts,
    proxy_config,
    stream_status,
)
from tests.servers import serve_in_thread

from unbroken.mock import reply_text
from unbroken.proxy import create_app
from unbroken.streams.journal import LiveTail, MemoryJournal, StreamMeta, StreamState

pytestmark = pytest.mark.integration

SEED, TOKENS = 3, 10
MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]


class RecordingJournal(MemoryJournal):
    """A memory journal that remembers the ids it created (the SDKs hide response headers)."""

    def __init__(self) -> None:
        super().__init__()
        self.created: list[str] = []

    async def create(self, meta: StreamMeta, state: StreamState, *args: Any,
                     **kwargs: Any) -> LiveTail:
        tail = await super().create(meta, state, *args, **kwargs)
        self.created.append(meta.stream_id)
        return tail


@pytest.fixture(scope="module")
def served(mock_server_session: str) -> Iterator[tuple[str, RecordingJournal]]:
    journal = RecordingJournal()
    app = create_app(proxy_config(mock_server_session, keepalive=0.05), journal=journal)
    with serve_in_thread(app) as base_url:
        yield base_url, journal


@pytest.fixture
def proxy(served: tuple[str, RecordingJournal], mock_server: str) -> str:
    return served[0]


def last_stream(served: tuple[str, RecordingJournal]) -> str:
    return served[1].created[-1]


# -- one function per SDK: the text it yields, and the finish reason it reports ---------------


def openai_chat(base: str, scenario: str) -> tuple[str, Any]:
    text, finish = [], None
    with openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0) as client:
        for chunk in client.chat.completions.create(
            model="m", messages=MESSAGES, stream=True, extra_headers={"Unbroken-Mock": scenario}
        ):
            for choice in chunk.choices:
                text.append(choice.delta.content or "")
                finish = choice.finish_reason or finish
    return "".join(text), finish


def openai_responses(base: str, scenario: str) -> tuple[str, Any]:
    text, finish = [], None
    with openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0) as client:
        for event in client.responses.create(
            model="m", input="hi", stream=True, extra_headers={"Unbroken-Mock": scenario}
        ):
            if event.type == "response.output_text.delta":
                text.append(event.delta)
            elif event.type == "response.completed":
                finish = event.response.status
    return "".join(text), finish


def anthropic_messages(base: str, scenario: str) -> tuple[str, Any]:
    text, finish = [], None
    with anthropic.Anthropic(base_url=base, api_key=KEY, max_retries=0) as client:
        for event in client.messages.create(
            model="m", max_tokens=100, messages=MESSAGES, stream=True,
            extra_headers={"Unbroken-Mock": scenario},
        ):
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                text.append(event.delta.text)
            elif event.type == "message_delta":
                finish = event.delta.stop_reason
    return "".join(text), finish


def gemini_stream(base: str, scenario: str) -> tuple[str, Any]:
    options = genai_types.HttpOptions(
        base_url=base, headers={"Unbroken-Mock": scenario},
        retry_options=genai_types.HttpRetryOptions(attempts=1),
    )
    text, finish = [], None
    with genai.Client(api_key=KEY, http_options=options) as client:
        for chunk in client.models.generate_content_stream(model="gemini-m", contents="hi"):
            text.append(chunk.text or "")
            if chunk.candidates and chunk.candidates[0].finish_reason:
                finish = chunk.candidates[0].finish_reason.value
    return "".join(text), finish


def ollama_chat(base: str, scenario: str) -> tuple[str, Any]:
    headers = {"Unbroken-Mock": scenario, "Authorization": f"Bearer {KEY}"}
    text, finish = [], None
    with ollama.Client(host=base, headers=headers) as client:
        for part in client.chat(model="m", messages=MESSAGES, stream=True):
            text.append(part.message.content or "")
            finish = part.done_reason or finish
    return "".join(text), finish


SDKS: dict[str, Callable[[str, str], tuple[str, Any]]] = {
    "openai-chat": openai_chat,
    "openai-responses": openai_responses,
    "anthropic": anthropic_messages,
    "gemini": gemini_stream,
    "ollama": ollama_chat,
}
SDK_ERRORS: dict[str, type[BaseException]] = {
    "openai-chat": openai.APIError,
    "openai-responses": openai.APIError,
    "anthropic": anthropic.APIError,
    "gemini": genai_errors.APIError,
    "ollama": ollama.ResponseError,
}
# The path each SDK posts to (google-genai 3 calls Gemini's /v1, not /v1beta).
SDK_PATHS = {dialect: call.path.split("?")[0] for dialect, call in CALLS.items()}
SDK_PATHS["gemini"] = "/v1/models/gemini-m:streamGenerateContent"
FINISH = {"openai-chat": "stop", "openai-responses": "completed", "anthropic": "end_turn",
          "gemini": "STOP", "ollama": "stop"}


@pytest.mark.parametrize("dialect", list(SDKS))
def test_sdk_through_the_proxy_matches_the_direct_stream(
    served: tuple[str, RecordingJournal], proxy: str, mock_server: str, dialect: str
) -> None:
    scenario = f"seed={SEED}; tokens={TOKENS}"
    direct = SDKS[dialect](mock_server, scenario)
    proxied = SDKS[dialect](proxy, scenario)
    assert direct == (reply_text(SEED, TOKENS), FINISH[dialect])
    assert proxied == direct
    status = stream_status(proxy, last_stream(served))
    assert (status["status"], status["text"], status["last_seq"]) == (
        "completed", reply_text(SEED, TOKENS), CALLS[dialect].total(TOKENS)
    )
    assert mock_counts(mock_server)["generations"] == {SDK_PATHS[dialect]: 2}


@pytest.mark.parametrize("dialect", list(SDKS))
@pytest.mark.parametrize("mid", [False, True])
def test_upstream_drop_makes_the_sdk_raise_and_keeps_the_prefix(
    served: tuple[str, RecordingJournal], proxy: str, mock_server: str, dialect: str, mid: bool
) -> None:
    call = CALLS[dialect]
    drop_after = call.first_text + 3  # four text deltas arrive whole
    scenario = f"seed={SEED}; tokens={TOKENS}; drop_after={drop_after}"
    if mid:
        scenario += "; drop_mid=1"  # the cut falls inside a multi-byte character
    with pytest.raises(SDK_ERRORS[dialect], match="upstream stream broke"):
        SDKS[dialect](proxy, scenario)
    status = stream_status(proxy, last_stream(served))
    assert status["status"] == "interrupted"
    assert status["finish_reason"] is None
    assert status["text"] == call.text_after(SEED, TOKENS, drop_after)
    assert len(status["text"]) > 0
    assert status["last_seq"] == drop_after + 1  # the frames, then the proxy's error frame
    assert status["error"]["type"] == "TransportError"
    assert mock_counts(mock_server)["generations"] == {SDK_PATHS[dialect]: 1}


@pytest.mark.parametrize("dialect", list(SDKS))
def test_keepalives_during_an_upstream_stall_do_not_upset_the_sdk(
    served: tuple[str, RecordingJournal], proxy: str, mock_server: str, dialect: str
) -> None:
    # The upstream goes silent for 0.3 s; the proxy sends a keep-alive every 0.05 s.
    scenario = f"seed={SEED}; tokens={TOKENS}; stall_after={CALLS[dialect].first_text}; " \
               "stall_s=0.3"
    assert SDKS[dialect](proxy, scenario) == (reply_text(SEED, TOKENS), FINISH[dialect])
    assert stream_status(proxy, last_stream(served))["status"] == "completed"
