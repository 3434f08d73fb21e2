"""Whole user-perceived characters (grapheme clusters) out of a stream of text deltas.

A code point is not what a reader sees as one character: 🧑🏿‍💻 is four code points, 1️⃣ three,
a flag two, é may be two. Providers split deltas between any two code points, so a UI that
prints each delta shows 🧑 then 🧑🏿 then 🧑🏿‍💻, or a lone regional-indicator letter before its
flag. ``GraphemeBuffer`` holds back the last cluster of what it was given until text after it
(or the end) shows that nothing more can join it. Unicode's segmentation rules (UAX #29) only
ever look back from a boundary, so the clusters before the last one are final.

Segmentation is the ``regex`` module's ``\\X`` (UAX #29 extended grapheme clusters, its own and
newer Unicode data than ``unicodedata``'s); it comes with the ``client`` extra. This is display
logic, not part of the sans-I/O core: the core commits code points exactly as they arrived.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import regex

__all__ = ["GraphemeBuffer", "cluster_starts", "whole_clusters", "whole_clusters_async"]

_CLUSTER = regex.compile(r"\X")


class GraphemeBuffer:
    """``push`` text, get back the whole clusters it completes; ``flush`` the rest at the end.

    The text out is the text in, in order and exactly once: only where it is cut differs.
    """

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held = ""

    @property
    def held(self) -> str:
        """The last cluster given, not yet shown: text after it may still join it."""
        return self._held

    def push(self, text: str) -> str:
        if not text:
            return ""
        pending = self._held + text
        # Only what was held plus the new text is segmented: what was shown ended on a
        # boundary, and no rule looks back past one. (findall: a third faster than finditer.)
        last = _CLUSTER.findall(pending)[-1]
        self._held = last
        return pending[: len(pending) - len(last)]

    def flush(self) -> str:
        """The held cluster, at the end of the text (nothing more can join it)."""
        held, self._held = self._held, ""
        return held


def whole_clusters(texts: Iterator[str],
                   failures: type[BaseException] | tuple[type[BaseException], ...] = Exception
                   ) -> Iterator[str]:
    """``texts`` re-cut between whole clusters. When ``texts`` raises one of ``failures``, the
    held cluster still comes out first (the caller shows all that arrived), then the error."""
    buffer = GraphemeBuffer()
    try:
        for text in texts:
            if whole := buffer.push(text):
                yield whole
    except failures:
        if held := buffer.flush():
            yield held
        raise
    if held := buffer.flush():
        yield held


async def whole_clusters_async(
    texts: AsyncIterator[str],
    failures: type[BaseException] | tuple[type[BaseException], ...] = Exception,
) -> AsyncIterator[str]:
    """The async twin of ``whole_clusters``."""
    buffer = GraphemeBuffer()
    try:
        async for text in texts:
            if whole := buffer.push(text):
                yield whole
    except failures:
        if held := buffer.flush():
            yield held
        raise
    if held := buffer.flush():
        yield held


def cluster_starts(text: str) -> list[int]:
    """The index where each grapheme cluster of ``text`` starts (for checks and tests)."""
    return [match.start() for match in _CLUSTER.finditer(text)]
