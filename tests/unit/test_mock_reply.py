"""The mock's deterministic reply text."""

from __future__ import annotations

import pytest

from unbroken.mock import reply_deltas, reply_text


def test_golden_deltas_for_seed_0_and_1() -> None:
    # Pinned: other tests and users rely on the same seed giving the same text forever.
    assert reply_deltas(0, 3) == ["\t🇨🇳한국어 b", "” stream", "🏳️\u200d🌈❤️👍🏽 theñ"]
    assert reply_deltas(1, 3) == [" stream\\\"ñ🧑🏿\u200d💻", "输出流式Hello1️", "⃣é"]


@pytest.mark.parametrize("seed", [0, 1, 7, 12345, -3])
@pytest.mark.parametrize("tokens", [1, 2, 40, 300])
def test_deltas_join_to_text_and_each_has_a_multibyte_character(seed: int, tokens: int) -> None:
    deltas = reply_deltas(seed, tokens)
    assert len(deltas) == tokens
    assert "".join(deltas) == reply_text(seed, tokens)
    for delta in deltas:
        assert delta
        assert len(delta.encode()) > len(delta)


def test_same_seed_same_text_other_seed_other_text() -> None:
    assert reply_text(5, 40) == reply_text(5, 40)
    assert reply_text(5, 40) != reply_text(6, 40)


def test_text_mixes_the_hard_characters() -> None:
    text = "".join(reply_text(seed, 100) for seed in range(3))
    for needle in ["\u200d", "🇯🇵", "🏽", "\\", '"', "\n", "日本語", "é", "𝄞", "&", "<"]:
        assert needle in text, needle


def test_deltas_vary_in_size() -> None:
    sizes = {len(delta.encode()) for delta in reply_deltas(0, 100)}
    assert len(sizes) > 10


def test_a_zwj_sequence_is_sometimes_split_between_deltas() -> None:
    deltas = reply_deltas(0, 300)
    splits = [
        index for index in range(len(deltas) - 1)
        if deltas[index].endswith("\u200d") or deltas[index + 1].startswith("\u200d")
    ]
    assert splits


def test_tokens_must_be_positive() -> None:
    with pytest.raises(ValueError, match="tokens"):
        reply_deltas(0, 0)
