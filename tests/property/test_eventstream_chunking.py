"""Any split of an event-stream body across reads decodes to the same messages (Hypothesis)."""

from __future__ import annotations

import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from unbroken.framing import EventStreamDecoder

HEADER_VALUES = st.one_of(
    st.booleans().map(lambda v: b"\x00" if v else b"\x01"),
    st.integers(-128, 127).map(lambda v: b"\x02" + v.to_bytes(1, "big", signed=True)),
    st.integers(-(2**63), 2**63 - 1).map(lambda v: b"\x05" + v.to_bytes(8, "big", signed=True)),
    st.binary(max_size=40).map(lambda v: b"\x06" + len(v).to_bytes(2, "big") + v),
    st.text(max_size=20).map(lambda v: b"\x07" + len(v.encode()).to_bytes(2, "big") + v.encode()),
    st.binary(min_size=16, max_size=16).map(lambda v: b"\x09" + v),
)


@st.composite
def messages(draw: st.DrawFn) -> bytes:
    names = draw(st.lists(st.text("abcxyz:-", min_size=1, max_size=8), max_size=4, unique=True))
    headers = b"".join(
        bytes([len(name)]) + name.encode() + draw(HEADER_VALUES) for name in names
    )
    payload = draw(st.binary(max_size=300))
    total = 16 + len(headers) + len(payload)
    prelude = total.to_bytes(4, "big") + len(headers).to_bytes(4, "big")
    body = prelude + zlib.crc32(prelude).to_bytes(4, "big") + headers + payload
    return body + zlib.crc32(body).to_bytes(4, "big")


@settings(max_examples=200, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=6), st.data())
def test_any_split_decodes_identically(bodies: list[bytes], data: st.DataObject) -> None:
    body = b"".join(bodies)
    whole = EventStreamDecoder().receive_data(body)
    assert [message.raw for message in whole] == bodies
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=30)))
    decoder = EventStreamDecoder()
    got = []
    for start, end in zip([0, *cuts], [*cuts, len(body)], strict=True):
        got += decoder.receive_data(body[start:end])
    assert got == whole
    assert decoder.receive_eof() == []
    assert decoder.unterminated == b""
