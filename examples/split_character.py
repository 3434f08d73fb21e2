"""Decode a built-in OpenAI-style stream whose reads cut a CJK character and an emoji in half.

Run: python examples/split_character.py
"""

from unbroken import SSEDecoder

BODY = (
    'data: {"choices":[{"index":0,"delta":{"content":"你好"}}]}\n\n'
    'data: {"choices":[{"index":0,"delta":{"content":"世界 👋"}}]}\n\n'
    "data: [DONE]\n\n"
).encode()


def main() -> None:
    # Cut the body into reads of 7 bytes: most multi-byte characters straddle two reads.
    reads = [BODY[i : i + 7] for i in range(0, len(BODY), 7)]
    cut = next(i for i, r in enumerate(reads) if r[-1] >= 0x80)
    print(f"{len(reads)} network reads; read {cut} ends inside a character: {reads[cut]!r}")
    decoder = SSEDecoder()
    for read in reads:
        for event in decoder.receive_data(read):
            print(f"event {event.event!r} ({event.nbytes} bytes): {event.data}")
    decoder.receive_eof()
    print("end of body; unterminated bytes:", decoder.unterminated)


if __name__ == "__main__":
    main()
