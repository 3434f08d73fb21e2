"""``iter_text`` on the SDK wrappers, over the real SDKs against the mock: the text deltas each
once, or with ``graphemes=True`` whole user-perceived characters, the held one before the SDK's
error. The mock's seed 1 splits 🧑🏿‍💻 and 1️⃣ between deltas on purpose."""

from __future__ import annotations

import openai
import pytest
from google import genai
from google.genai import types as genai_types
from tests.integration.test_client_graphemes import WHOLE

import unbroken
from unbroken.finish import Status
from unbroken.mock import reply_deltas, reply_text

pytestmark = pytest.mark.integration

MESSAGES: list[openai.types.chat.ChatCompletionMessageParam] = [
    {"role": "user", "content": "hi"}]


def chat(base_url: str, scenario: str) -> unbroken.sdk.TrackedStream[object]:
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="sk-test", max_retries=0)
    return unbroken.from_openai(client.chat.completions.create(
        model="m", messages=MESSAGES, stream=True, extra_headers={"Unbroken-Mock": scenario}))


def test_openai_text_deltas_as_they_come(mock_server: str) -> None:
    tracked = chat(mock_server, "seed=1; tokens=6")
    assert list(tracked.iter_text()) == reply_deltas(1, 6)
    assert (tracked.message.status, tracked.message.text) == (
        Status.COMPLETED, reply_text(1, 6))


def test_openai_whole_graphemes(mock_server: str) -> None:
    tracked = chat(mock_server, "seed=1; tokens=6")
    assert list(tracked.iter_text(graphemes=True)) == WHOLE


def test_the_held_cluster_comes_out_before_the_sdks_error(mock_server: str) -> None:
    tracked = chat(mock_server, "seed=1; tokens=6; drop_after=3")
    pieces: list[str] = []
    with pytest.raises(openai.APIConnectionError):
        for piece in tracked.iter_text(graphemes=True):
            pieces.append(piece)
    assert pieces == [' stream\\"ñ', "🧑🏿\u200d💻输出流式Hello", "1️⃣"]
    assert (tracked.message.status, tracked.message.text) == (
        Status.INTERRUPTED, "".join(pieces))


@pytest.mark.anyio
async def test_gemini_async_whole_graphemes(mock_server: str) -> None:
    options = genai_types.HttpOptions(base_url=mock_server,
                                      headers={"Unbroken-Mock": "seed=1; tokens=6"})
    client = genai.Client(api_key="k", http_options=options)
    stream = await client.aio.models.generate_content_stream(model="gemini-m", contents="hi")
    async with unbroken.from_gemini(stream) as tracked:
        pieces = [piece async for piece in tracked.iter_text(graphemes=True)]
    assert pieces == WHOLE
    assert tracked.message.status is Status.COMPLETED
