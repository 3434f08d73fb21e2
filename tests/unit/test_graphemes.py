"""``GraphemeBuffer``: text deltas in, whole grapheme clusters out, the text unchanged."""

from __future__ import annotations

import pytest

from unbroken.client.graphemes import GraphemeBuffer, cluster_starts


def pieces(deltas: list[str]) -> list[str]:
    buffer = GraphemeBuffer()
    out = [buffer.push(delta) for delta in deltas]
    out.append(buffer.flush())
    return out


@pytest.mark.parametrize(("deltas", "expected"), [
    # A ZWJ sequence split after its skin tone (the mock's seed 1 does this).
    (["ñ🧑🏿", "\u200d💻输出"], ["ñ", "🧑🏿\u200d💻输", "出"]),
    # A keycap: 1, then its variation selector and combining enclosing keycap.
    (["Hello1", "\ufe0f\u20e3é"], ["Hello", "1\ufe0f\u20e3", "é"]),
    # Regional indicators pair up: 🇨 alone is a letter box, not a flag.
    (["、🇨", "🇳…"], ["、", "🇨🇳", "…"]),
    (["🇨🇳🇯", "🇵"], ["🇨🇳", "", "🇯🇵"]),
    # A combining accent after its base, and a skin tone after its hand.
    (["cafe", "\u0301!"], ["caf", "e\u0301", "!"]),
    (["?👍", "🏽."], ["?", "👍🏽", "."]),
    # CR LF is one cluster; Hangul jamo join into one syllable.
    (["a\r", "\nb"], ["a", "\r\n", "b"]),
    (["\u1100", "\u1161", "\u11a8"], ["", "", "", "\u1100\u1161\u11a8"]),
    # Nothing to hold: each delta's last cluster waits for the next delta only.
    (["你好", "世界"], ["你", "好世", "界"]),
    ([], [""]),
    (["", "a", ""], ["", "", "", "a"]),
])
def test_clusters_come_out_whole_and_in_order(deltas: list[str], expected: list[str]) -> None:
    assert pieces(deltas) == expected
    assert "".join(expected) == "".join(deltas)


def test_the_held_cluster_is_visible_and_flush_empties_it() -> None:
    buffer = GraphemeBuffer()
    assert (buffer.push("👨\u200d👩"), buffer.held) == ("", "👨\u200d👩")
    assert (buffer.push("\u200d👧x"), buffer.held) == ("👨\u200d👩\u200d👧", "x")
    assert (buffer.flush(), buffer.held, buffer.flush()) == ("x", "", "")


def test_cluster_starts() -> None:
    assert cluster_starts("a🇨🇳e\u0301\r\n") == [0, 1, 3, 5]
    assert cluster_starts("") == []
