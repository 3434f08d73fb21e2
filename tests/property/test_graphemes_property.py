"""For any text and any cut into deltas, ``GraphemeBuffer`` gives back the same text, cut only
where the whole text has a grapheme cluster boundary."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from unbroken.client.graphemes import GraphemeBuffer, cluster_starts

# Pieces that build multi-code-point clusters, and a spread of single code points.
PARTS = ["\u200d", "\ufe0f", "\u20e3", "\u0301", "🏿", "🏽", "🇨", "🇳", "🇯", "🇵", "🧑", "💻",
         "👨", "👩", "\r", "\n", "\u1100", "\u1161", "\u11a8", "1", "e", "a", "你", " ",
         "\U000e0067", "🏴", "\u0915", "\u094d", "\u0937"]
TEXT = st.lists(st.one_of(st.sampled_from(PARTS), st.characters()), max_size=40).map("".join)


@given(TEXT, st.lists(st.integers(min_value=0, max_value=40), max_size=12))
def test_any_cut_gives_the_same_text_cut_on_boundaries(text: str, cuts: list[int]) -> None:
    points = sorted({min(cut, len(text)) for cut in cuts})
    deltas = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    buffer = GraphemeBuffer()
    out = [buffer.push(delta) for delta in deltas] + [buffer.flush()]
    assert "".join(out) == text
    boundaries = {*cluster_starts(text), len(text)}
    position = 0
    for piece in out:
        position += len(piece)
        assert position in boundaries or position == 0
