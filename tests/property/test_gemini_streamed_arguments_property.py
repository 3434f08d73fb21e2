"""Any arguments object, streamed as Vertex ``partialArgs`` leaf by leaf in document order (strings
in random pieces), is written as exactly its compact JSON text (Hypothesis)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from unbroken.dialects.gemini_arguments import StreamedArguments

# Names a path writes as .name or ['name'] (quotes and backslashes escaped).
KEYS = st.one_of(
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True),
    st.text(min_size=1, max_size=6),
)
SCALARS = st.one_of(
    st.text(max_size=12),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)
# No empty object or array: a value that holds no leaf has no path to send it by.
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=4),
        st.dictionaries(KEYS, inner, min_size=1, max_size=4),
    ),
    max_leaves=20,
)
ARGUMENTS = st.dictionaries(KEYS, VALUES, min_size=1, max_size=4)


def path_of(segments: list[str | int]) -> str:
    out = "$"
    for segment in segments:
        if isinstance(segment, int):
            out += f"[{segment}]"
        elif segment.isidentifier() and segment.isascii():
            out += "." + segment
        else:
            out += "['" + segment.replace("\\", "\\\\").replace("'", "\\'") + "']"
    return out


def leaves(value: Any, segments: list[str | int]) -> list[tuple[list[str | int], Any]]:
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in leaves(item, [*segments, key])]
    if isinstance(value, list):
        return [leaf for n, item in enumerate(value) for leaf in leaves(item, [*segments, n])]
    return [(segments, value)]


@settings(max_examples=150, deadline=None)
@given(arguments=ARGUMENTS, data=st.data())
def test_leaves_in_document_order_give_the_compact_text(arguments: dict[str, Any],
                                                        data: st.DataObject) -> None:
    streamed = StreamedArguments()
    text = ""
    for segments, value in leaves(arguments, []):
        path = path_of(segments)
        if isinstance(value, str):
            cuts = sorted(data.draw(st.lists(st.integers(0, len(value)), max_size=3)))
            pieces = [value[a:b] for a, b in zip([0, *cuts], [*cuts, len(value)], strict=True)]
            for n, piece in enumerate(pieces):
                text += streamed.add({"jsonPath": path, "stringValue": piece,
                                      "willContinue": n < len(pieces) - 1})
            if data.draw(st.booleans()):  # Vertex ends a string with an empty piece
                text += streamed.add({"jsonPath": path, "stringValue": ""})
        elif isinstance(value, bool):
            text += streamed.add({"jsonPath": path, "boolValue": value})
        elif value is None:
            text += streamed.add({"jsonPath": path, "nullValue": "NULL_VALUE"})
        else:
            text += streamed.add({"jsonPath": path, "numberValue": value})
    text += streamed.close()
    assert text == json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)
