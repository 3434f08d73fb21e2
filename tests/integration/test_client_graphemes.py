"""``iter_text(graphemes=True)`` against the mock, whose deltas split clusters on purpose: every
piece is whole user-perceived characters, the text is unchanged, and a cluster still held when
the stream breaks comes out before the error is raised."""

from __future__ import annotations

import pytest

import unbroken
from unbroken.finish import Status
from unbroken.mock import reply_deltas, reply_text

pytestmark = pytest.mark.integration

CHAT = "/v1/chat/completions"
BODY = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}

# reply_deltas(1, 6):
#   ' stream\"ñ🧑🏿\u200d' | '💻输出流式Hello1️⃣' | 'é' | '한국어🚀\"”' | '👍🏽𝄞' | '❤️'
WHOLE = [' stream\\"ñ', "🧑🏿\u200d💻输出流式Hello", "1️⃣", 'é한국어🚀\\"', "”👍🏽", "𝄞", "❤️"]


def test_the_mock_splits_clusters_and_graphemes_keeps_them_whole(mock_server: str) -> None:
    assert reply_deltas(1, 6)[0].endswith("🧑🏿\u200d")  # the split this test is about
    with unbroken.stream("POST", mock_server + CHAT, dialect="openai-chat", json=BODY,
                         headers={"Unbroken-Mock": "seed=1; tokens=6"}) as s:
        pieces = list(s.iter_text(graphemes=True))
    assert pieces == WHOLE
    assert "".join(pieces) == reply_text(1, 6) == s.message.text
    assert s.message.status is Status.COMPLETED


@pytest.mark.anyio
async def test_the_async_stream_gives_the_same_pieces(mock_server: str) -> None:
    async with unbroken.astream("POST", mock_server + CHAT, dialect="openai-chat", json=BODY,
                                headers={"Unbroken-Mock": "seed=1; tokens=6"}) as s:
        pieces = [piece async for piece in s.iter_text(graphemes=True)]
    assert pieces == WHOLE


def test_without_graphemes_the_deltas_come_as_they_are(mock_server: str) -> None:
    with unbroken.stream("POST", mock_server + CHAT, dialect="openai-chat", json=BODY,
                         headers={"Unbroken-Mock": "seed=1; tokens=6"}) as s:
        assert list(s.iter_text()) == reply_deltas(1, 6)


def test_a_held_cluster_comes_out_before_the_error(mock_server: str) -> None:
    # The connection drops after the third frame (role chunk, then two deltas): '1️⃣' is held
    # when it breaks, and nothing can resume a bare upstream.
    pieces: list[str] = []
    with pytest.raises(unbroken.Interrupted), unbroken.stream(
        "POST", mock_server + CHAT, dialect="openai-chat", json=BODY,
        headers={"Unbroken-Mock": "seed=1; tokens=6; drop_after=3"},
    ) as s:
        for piece in s.iter_text(graphemes=True):
            pieces.append(piece)
    assert pieces == [' stream\\"ñ', "🧑🏿\u200d💻输出流式Hello", "1️⃣"]
    assert "".join(pieces) == s.message.text
    assert s.message.status is Status.INTERRUPTED
