"""The deterministic reply a scenario streams, and the tool call it can end with.

``reply_deltas(seed, tokens)`` is the list of text deltas (one per text frame); ``reply_text`` is
their concatenation. The same seed always gives the same text, on every Python version (only
``random.Random`` methods with a fixed algorithm are used).

Every delta holds at least one multi-byte UTF-8 character, so a cut inside a multi-byte character
(``drop_mid``, ``split_utf8``) is possible in every frame that carries text. Deltas mix ASCII,
2-, 3- and 4-byte characters, multi-code-point emoji (ZWJ sequences, flags, skin tones, keycaps),
quotes, backslashes, tabs, newlines and the characters ``< > &`` that some JSON encoders escape.
A multi-code-point emoji may be split between two deltas at a code point boundary, as real
tokenizers do; a delta never splits a code point.
"""

from __future__ import annotations

import random

__all__ = [
    "PROMPT_TOKENS",
    "TOOL_ARGUMENTS",
    "TOOL_ARGUMENTS_PARTS",
    "TOOL_NAME",
    "reply_deltas",
    "reply_text",
]

ASCII_PIECES = (
    "Hello", " world", " the", " stream", ",", ".", " ok", " 42", " a", " b", "!", "?",
    '"', "'", "\\", "\n", "\t", " <b>", " & ", "{}", "[1]",
)
MULTIBYTE_PIECES = (
    # 2 bytes
    "é", "Ω", "ß", "ж", "ñ",
    # 3 bytes
    "你好", "世界", "流式", "输出", "。", "、", "日本語", "テスト", "한국어", "「引用」", "“", "”",
    "€", "…",
    # 4 bytes and multi-code-point sequences
    "😀", "🚀", "👍🏽", "👋🏿", "👨‍👩‍👧‍👦", "🧑🏿‍💻", "🏳️‍🌈", "🇯🇵", "🇨🇳", "1️⃣", "❤️", "𝄞",
)
# Sequences of several code points that a tokenizer may split between two deltas.
SPLITTABLE = frozenset({"👍🏽", "👋🏿", "👨‍👩‍👧‍👦", "🧑🏿‍💻", "🏳️‍🌈", "🇯🇵", "🇨🇳", "1️⃣", "❤️"})

PROMPT_TOKENS = 12
TOOL_NAME = "get_weather"
# The tool call's arguments, a JSON object text, and the two deltas that stream it.
TOOL_ARGUMENTS_PARTS = ('{"city": "東京 🌧", ', '"unit": "celsius"}')
TOOL_ARGUMENTS = "".join(TOOL_ARGUMENTS_PARTS)


def reply_deltas(seed: int, tokens: int) -> list[str]:
    """The ``tokens`` text deltas of the reply for ``seed``, each a non-empty string."""
    if tokens < 1:
        raise ValueError("tokens must be at least 1")
    rng = random.Random(seed)
    pieces_per_delta: list[list[str]] = []
    for _ in range(tokens):
        pieces = [rng.choice(MULTIBYTE_PIECES)]
        for _ in range(rng.randint(0, 4)):
            pool = ASCII_PIECES if rng.random() < 0.5 else MULTIBYTE_PIECES
            pieces.append(rng.choice(pool))
        rng.shuffle(pieces)
        pieces_per_delta.append(pieces)
    deltas = ["".join(pieces) for pieces in pieces_per_delta]
    # Move the tail code points of a final multi-code-point emoji into the next delta.
    for index in range(tokens - 1):
        last = pieces_per_delta[index][-1]
        if last in SPLITTABLE and rng.random() < 0.5:
            cut = rng.randint(1, len(last) - 1)
            deltas[index] = deltas[index][: len(deltas[index]) - len(last) + cut]
            deltas[index + 1] = last[cut:] + deltas[index + 1]
    return [_with_multibyte(delta) for delta in deltas]


def reply_text(seed: int, tokens: int) -> str:
    """The exact text a scenario with this seed and token count streams."""
    return "".join(reply_deltas(seed, tokens))


def _with_multibyte(delta: str) -> str:
    # A split can leave only ASCII behind (a keycap's leading digit); keep the promise above.
    if any(ord(char) > 0x7F for char in delta):
        return delta
    return delta + "。"
