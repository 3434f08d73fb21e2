"""What ``iter_text(graphemes=True)`` costs per text delta, beside the ways to do without it.

The deltas are the mock's (``reply_deltas``: Chinese, Korean, emoji ZWJ sequences, flags,
keycaps, split between any two code points on purpose). Every peer gets the same deltas and
must give back exactly their text, cut only between whole grapheme clusters (checked):

- ``plain``: each delta as it is (no grapheme safety; the floor);
- ``GraphemeBuffer``: unbroken's, which segments only the held cluster plus the new delta;
- ``resegment``: what one writes without it: segment all the text so far at every delta and
  show up to the last cluster (``regex`` ``\\X``, the same segmentation), quadratic in length.

Figures are microseconds per delta, best of ``--repeat`` runs, and each peer's ratio to
``GraphemeBuffer``.

    python benchmarks/graphemes.py [--tokens 2000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable
from pathlib import Path

import regex

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script, from anywhere
from unbroken.client.graphemes import GraphemeBuffer, cluster_starts
from unbroken.mock import reply_deltas

_CLUSTER = regex.compile(r"\X")


def plain(deltas: list[str]) -> list[str]:
    return list(deltas)


def buffered(deltas: list[str]) -> list[str]:
    buffer = GraphemeBuffer()
    out = [buffer.push(delta) for delta in deltas]
    out.append(buffer.flush())
    return out


def resegment(deltas: list[str]) -> list[str]:
    text, shown, out = "", 0, []
    for delta in deltas:
        text += delta
        last = 0
        for match in _CLUSTER.finditer(text):
            last = match.start()
        out.append(text[shown:last])
        shown = last
    out.append(text[shown:])
    return out


def best_us_per_delta(peer: Callable[[list[str]], list[str]], deltas: list[str],
                      repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        peer(deltas)
        best = min(best, time.perf_counter() - started)
    return best / len(deltas) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    deltas = reply_deltas(1, args.tokens)
    text = "".join(deltas)
    boundaries = {*cluster_starts(text), len(text)}
    peers = {"plain": plain, "GraphemeBuffer": buffered, "resegment": resegment}
    for name, peer in peers.items():
        pieces = peer(deltas)
        assert "".join(pieces) == text, name
        if name != "plain":
            cuts = itertools.accumulate(map(len, pieces))
            assert all(cut in boundaries for cut in cuts if cut), name
    ends = list(itertools.accumulate(map(len, deltas)))[:-1]
    split = sum(1 for end in ends if end not in boundaries)
    print(f"{len(deltas)} deltas, {len(text)} code points, {len(boundaries) - 1} clusters; "
          f"{split} deltas end inside a cluster")
    ours = best_us_per_delta(buffered, deltas, args.repeat)
    for name, peer in peers.items():
        us = best_us_per_delta(peer, deltas, args.repeat)
        print(f"{name:>15}: {us:9.3f} us/delta   {us / ours:9.3f}x GraphemeBuffer")


if __name__ == "__main__":
    main()
