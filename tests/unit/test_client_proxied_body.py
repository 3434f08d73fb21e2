"""ProxiedBody: whole frames handed on, the seq kept, the proxy's notice held, resumes checked.

Bodies are written as the proxy sends them (``id: <stream_id>:<n>``, a keep-alive comment with
no blank line after it, the notice without an id); each is fed whole, one byte at a time and
split at every point, and must give the same bytes and seq.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from unbroken.client.proxied_body import ProxiedBody, ResumeMismatch
from unbroken.framing import SSEDecoder

SID = "ub_0123456789abcdef01234567"


def sse(seq: int | None, data: str, event: str | None = None) -> bytes:
    out = b"" if event is None else b"event: " + event.encode() + b"\n"
    if seq is not None:
        out += b"id: %s:%d\n" % (SID.encode(), seq)
    return out + b"data: " + data.encode() + b"\n\n"


FRAMES = [sse(1, '{"t":"你"}'), b": keep-alive\n" + sse(2, '{"t":"好🙂"}'), sse(3, "[DONE]")]
NOTICE = b'data: {"error":{"message":"unbroken proxy: this response ended early"}}\n\n'
GEMINI_NOTICE = (b'data: {"error":{"code":500,"message":"unbroken proxy: ended early","details":'
                 b'[{"domain":"unbroken","reason":"STREAM_INCOMPLETE","metadata":{"code":'
                 b'"stream_incomplete","status":"streaming","resumable":"true"}}]}}\n\n')


def splits(body: bytes) -> Iterator[list[bytes]]:
    yield [body]
    yield [body[i:i + 1] for i in range(len(body))]
    for i in range(1, len(body)):
        yield [body[:i], body[i:]]


def feed(state: ProxiedBody, chunks: list[bytes]) -> list[bytes]:
    return [out for chunk in chunks if (out := state.receive(chunk))]


def whole_frames(pieces: list[bytes]) -> None:
    """Every piece handed on ends at a frame's end: none leaves a decoder holding bytes."""
    for piece in pieces:
        decoder = SSEDecoder()
        decoder.receive_data(piece)
        assert decoder.bytes_dispatched == len(piece), piece


def test_a_whole_body_passes_as_it_came_under_any_chunking() -> None:
    body = b"".join(FRAMES)
    for chunks in splits(body):
        state = ProxiedBody(SID, ndjson=False)
        pieces = feed(state, chunks)
        assert b"".join(pieces) == body
        whole_frames(pieces)
        assert (state.seq, state.receive_eof(), state.give_up()) == (3, True, b"")


def test_a_read_that_ends_at_a_frame_end_is_handed_on_without_a_copy() -> None:
    state = ProxiedBody(SID, ndjson=False)
    chunk = FRAMES[0]
    assert state.receive(chunk) is chunk


@pytest.mark.parametrize("cut", range(1, len(FRAMES[0] + FRAMES[1])))
def test_a_cut_hands_on_only_the_frames_before_it(cut: int) -> None:
    body = FRAMES[0] + FRAMES[1]
    state = ProxiedBody(SID, ndjson=False)
    out = b"".join(feed(state, [body[:cut]]))
    complete = 0 if cut < len(FRAMES[0]) else 1
    assert out == FRAMES[0][: len(FRAMES[0]) * complete]
    assert state.seq == complete
    # Inside a frame (or a keep-alive line): resume. A clean end right after a whole frame
    # with no notice is the proxy's word that the stream ended there.
    assert state.receive_eof() is (cut == len(FRAMES[0]))
    assert state.last_event_id == f"{SID}:{complete}"


def test_the_proxys_notice_is_held_and_given_back_only_when_giving_up() -> None:
    body = FRAMES[0] + FRAMES[1] + NOTICE
    for chunks in splits(body):
        state = ProxiedBody(SID, ndjson=False)
        assert b"".join(feed(state, chunks)) == FRAMES[0] + FRAMES[1]
        assert (state.seq, state.receive_eof()) == (2, False)
        assert state.give_up() == NOTICE
        assert state.give_up() == b""


def test_a_resume_continues_verbatim_when_the_post_had_ids() -> None:
    state = ProxiedBody(SID, ndjson=False)
    state.receive(FRAMES[0] + FRAMES[1][:20])
    state.resumed()
    assert not state.progressed
    resumed = b"retry: 1000\n" + FRAMES[1] + FRAMES[2]
    for chunks in splits(resumed):
        again = ProxiedBody(SID, ndjson=False)
        again.receive(FRAMES[0] + FRAMES[1][:20])
        again.resumed()
        pieces = feed(again, chunks)
        assert b"".join(pieces) == resumed
        assert (again.seq, again.progressed, again.receive_eof()) == (3, True, True)


@pytest.mark.parametrize(("first", "got"), [
    (sse(3, "x"), f"{SID}:3"),
    (sse(1, "x"), f"{SID}:1"),
    (b"id: ub_other:2\ndata: x\n\n", "ub_other:2"),
])
def test_a_resume_that_does_not_continue_raises_naming_both(first: bytes, got: str) -> None:
    state = ProxiedBody(SID, ndjson=False)
    state.receive(FRAMES[0])
    state.resumed()
    with pytest.raises(ResumeMismatch) as caught:
        state.receive(first)
    assert (caught.value.expected, caught.value.got) == (f"{SID}:2", got)
    assert f"{SID}:2" in str(caught.value) and got in str(caught.value)
    assert state.seq == 1


def test_a_resume_that_is_only_the_notice_brings_no_progress() -> None:
    state = ProxiedBody(SID, ndjson=False)
    state.receive(FRAMES[0])
    state.resumed()
    assert state.receive(b"retry: 1000\n" + NOTICE) == b""
    # Its block is handed on as it came (the retry hint is part of it) if the body ends there.
    assert (state.progressed, state.receive_eof(), state.give_up()) == (
        False, False, b"retry: 1000\n" + NOTICE)


def test_an_unnumbered_frame_followed_by_more_is_handed_on() -> None:
    state = ProxiedBody(SID, ndjson=False)
    body = FRAMES[0] + NOTICE + FRAMES[1]
    assert b"".join(feed(state, [FRAMES[0] + NOTICE, FRAMES[1]])) == body
    assert (state.seq, state.receive_eof()) == (2, True)


def test_a_gemini_body_without_ids_counts_frames_and_gets_resumed_frames_without_ids() -> None:
    post = b'data: {"a":1}\n\n\ndata: {"a":2}\n\n' + GEMINI_NOTICE
    for chunks in splits(post):
        state = ProxiedBody(SID, ndjson=False)
        assert b"".join(feed(state, chunks)) == b'data: {"a":1}\n\n\ndata: {"a":2}\n\n'
        assert (state.seq, state.receive_eof()) == (2, False)
    state.resumed()
    resumed = b"retry: 1000\n" + sse(3, '{"a":3}') + b": keep-alive\n" + sse(4, '{"a":4}')
    assert b"".join(feed(state, [resumed])) == b'data: {"a":3}\n\ndata: {"a":4}\n\n'
    assert (state.seq, state.receive_eof()) == (4, True)


def test_an_error_frame_without_the_mark_is_a_gemini_frame() -> None:
    state = ProxiedBody(SID, ndjson=False)
    error = b'data: {"error":{"code":500,"message":"upstream"}}\n\n'
    assert state.receive(error) == error
    assert (state.seq, state.receive_eof()) == (1, True)


def test_ndjson_lines_count_and_the_proxys_error_line_is_held() -> None:
    lines = b'{"message":{"content":"\xe4\xbd\xa0"},"done":false}\n\n{"done":false}\n'
    notice = (b'{"error":"unbroken proxy: this response ended before stream x did [unbroken '
              b'code=stream_incomplete; status=streaming; resumable=true]"}\n')
    for chunks in splits(lines + notice):
        state = ProxiedBody(SID, ndjson=True)
        assert b"".join(feed(state, chunks)) == lines
        assert (state.seq, state.receive_eof(), state.give_up()) == (2, False, notice)
    state = ProxiedBody(SID, ndjson=True)
    state.receive(lines + notice)
    state.resumed()
    resumed = sse(3, '{"error":"unbroken proxy: upstream broke"}')
    # The held line was the proxy's notice, or a journaled frame the resume sends again: it
    # goes out once, as the resume's numbered frame.
    assert state.receive(resumed) == b'{"error":"unbroken proxy: upstream broke"}\n'
    assert (state.seq, state.receive_eof(), state.give_up()) == (3, True, b"")


def test_an_ollama_error_line_without_the_mark_is_the_providers() -> None:
    line = b'{"error":"unbroken proxy: said by the model, not the proxy"}\n'
    state = ProxiedBody(SID, ndjson=True)
    assert state.receive(line) == line
    assert (state.seq, state.receive_eof(), state.give_up()) == (1, True, b"")


def test_a_cut_ndjson_line_is_not_handed_on() -> None:
    state = ProxiedBody(SID, ndjson=True)
    assert state.receive(b'{"done":false}\n{"do') == b'{"done":false}\n'
    assert (state.seq, state.receive_eof()) == (1, False)


def test_a_resume_before_any_frame_hands_on_frames_without_ids() -> None:
    state = ProxiedBody(SID, ndjson=False)
    assert state.receive(b"data: {\"a\"") == b""
    assert state.last_event_id == f"{SID}:0"
    state.resumed()
    out = state.receive(sse(1, '{"type":"message_start"}', event="message_start"))
    assert out == b'event: message_start\ndata: {"type":"message_start"}\n\n'


def test_a_post_that_continues_with_last_event_id_starts_after_it() -> None:
    state = ProxiedBody(SID, ndjson=False, after=2)
    assert state.receive(FRAMES[2]) == FRAMES[2]
    assert (state.seq, state.receive_eof()) == (3, True)
    with pytest.raises(ResumeMismatch):
        ProxiedBody(SID, ndjson=False, after=1).receive(FRAMES[2])


def test_bytes_the_decoder_refuses_are_handed_on_as_they_came() -> None:
    state = ProxiedBody(SID, ndjson=True)
    assert state.receive(b'{"done":false}\n{"do') == b'{"done":false}\n'
    assert state.receive(b'ne": oops}\n{"done"') == b'{"done": oops}\n{"done"'
    assert state.receive(b":true}\n") == b":true}\n"  # no framing any more
    assert (state.seq, state.receive_eof()) == (1, True)  # not a body to resume


def test_invalid_utf8_is_the_sdks_to_judge() -> None:
    state = ProxiedBody(SID, ndjson=False)
    frame = b"id: " + SID.encode() + b":1\ndata: \xff\xfe\n\n"
    assert state.receive(frame) == frame
    assert (state.seq, state.receive_eof()) == (1, True)
