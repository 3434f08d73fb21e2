"""ProxiedBody: whole frames handed on, the seq kept, the proxy's notice held, resumes checked.

Bodies are written as the proxy sends them (``id: <stream_id>:<n>``, a keep-alive comment with
no blank line after it, the notice without an id); each is fed whole, one byte at a time and
split at every point, and must give the same bytes and seq. Numbered frames in the proxy's form
are cut by byte searches (``NumberedBlocks``), the rest by the decoders: both routes are fed
here, and a body that moves from one to the other mid-way.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from unbroken.client import proxied_body
from unbroken.client.numbered_blocks import NumberedBlocks
from unbroken.client.proxied_body import ProxiedBody, ResumeMismatch
from unbroken.framing import DEFAULT_MAX_EVENT_SIZE, SSEDecoder

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


# -- numbered frames cut by byte searches ------------------------------------------------------


class _NoDecoding:
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("a body in the proxy's own form was decoded")


def test_a_body_in_the_proxys_form_is_cut_without_decoding_a_frame(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proxied_body, "SSEDecoder", _NoDecoding)
    body = b"retry: 1000\n" + b"".join(FRAMES) + sse(4, "x", event="message_stop")
    for chunks in splits(body):
        state = ProxiedBody(SID, ndjson=False)
        pieces = feed(state, chunks)
        assert b"".join(pieces) == body
        assert len(pieces) <= len(chunks)  # at most one piece per read
        whole_frames(pieces)
        assert (state.seq, state.progressed, state.receive_eof()) == (4, True, True)
    state = ProxiedBody(SID, ndjson=False)
    state.receive(FRAMES[0])
    state.resumed()  # the POST had ids: a resume's frames pass as they come, uncut
    assert state.receive(b"retry: 1000\n" + FRAMES[1] + FRAMES[2]) == (
        b"retry: 1000\n" + FRAMES[1] + FRAMES[2])
    assert (state.seq, state.receive_eof()) == (3, True)


def test_one_read_of_many_frames_is_one_piece_with_the_last_seq() -> None:
    frames = [sse(n, f'{{"n":{n}}}') for n in range(1, 501)]
    state = ProxiedBody(SID, ndjson=False)
    body = b"".join(frames)
    assert state.receive(body + frames[0][:7]) == body  # (and the start of one more)
    assert (state.seq, state.last_event_id, state.receive_eof()) == (500, f"{SID}:500", False)


def test_an_id_inside_a_data_line_is_data() -> None:
    frame = sse(1, f'{{"t":"id: {SID}:7"}}')
    state = ProxiedBody(SID, ndjson=False)
    assert state.receive(frame) == frame
    assert state.seq == 1


def test_cr_line_ends_after_lf_frames_go_to_the_decoder_mid_body() -> None:
    crlf = sse(2, '{"t":"b"}').replace(b"\n", b"\r\n")
    body = FRAMES[0] + crlf + sse(3, "[DONE]")
    for chunks in splits(body):
        state = ProxiedBody(SID, ndjson=False)
        pieces = feed(state, chunks)
        assert b"".join(pieces) == body
        whole_frames(pieces)
        assert (state.seq, state.receive_eof()) == (3, True)


def test_a_bom_after_the_first_frame_is_no_bom_of_the_body() -> None:
    # Only a body's first bytes can be a BOM: here it starts the second block's first field
    # name, so that block has no id and, at the end, is held as an unnumbered frame.
    later = b"\xef\xbb\xbf" + sse(2, "x")
    for chunks in splits(FRAMES[0] + later):
        state = ProxiedBody(SID, ndjson=False)
        assert b"".join(feed(state, chunks)) == FRAMES[0]
        assert (state.seq, state.receive_eof(), state.give_up()) == (1, False, later)


def test_a_leading_bom_is_the_bodys_own() -> None:
    body = b"\xef\xbb\xbf" + FRAMES[0] + FRAMES[2].replace(b":3\n", b":2\n")
    for chunks in splits(body):
        state = ProxiedBody(SID, ndjson=False)
        assert b"".join(feed(state, chunks)) == body
        assert (state.seq, state.receive_eof()) == (2, True)


def test_a_read_whose_first_frame_skips_a_seq_is_an_error_naming_both() -> None:
    state = ProxiedBody(SID, ndjson=False)
    assert state.receive(FRAMES[0]) == FRAMES[0]
    with pytest.raises(ResumeMismatch) as caught:
        state.receive(sse(3, "x"))
    assert (caught.value.expected, caught.value.got, state.seq) == (f"{SID}:2", f"{SID}:3", 1)


def test_a_frame_over_the_size_limit_makes_the_body_opaque() -> None:
    state = ProxiedBody(SID, ndjson=False)
    assert state.receive(FRAMES[0]) == FRAMES[0]
    head = b"id: " + SID.encode() + b":2\ndata: "
    piece = b"x" * 2**20
    pieces = DEFAULT_MAX_EVENT_SIZE // len(piece)
    out = [state.receive(head)] + [state.receive(piece) for _ in range(pieces - 1)]
    assert b"".join(out) == b""  # the frame in progress is held, up to the limit
    last = state.receive(piece)  # past it: the decoder refuses it, all of it goes on as is
    assert last == head + piece * pieces
    assert state.receive(b"\n\n") == b"\n\n"
    assert (state.seq, state.receive_eof()) == (1, True)


NUMBERED = NumberedBlocks(SID)


@pytest.mark.parametrize(("run", "after", "seq"), [
    (sse(1, "a"), 0, 1),
    (b"retry: 1000\n" + sse(1, "a", event="e") + b": keep-alive\n" + sse(2, "b"), 0, 2),
    (sse(5, "a") + NOTICE + sse(6, "b"), 4, 6),  # an unnumbered block between: passed on
    (sse(1, "a") + sse(2, "b") + sse(3, "c"), 0, 3),
    (b"\n" + sse(1, "a"), 0, 1),  # a blank line first
    (sse(8, '{"t":"x"}'), 7, 8),  # one frame
    # Two id lines in one block (the proxy writes one): the seq is the last id's, as SSE
    # reads it; the first line is what the continuity check reads, so it is not caught here.
    (sse(1, "a").replace(b"data", b"id: " + SID.encode() + b":2\ndata"), 0, 2),
    # A CR in a block before the last splits it at most into one without an id: handed on.
    (sse(1, "a").replace(b"\n\n", b"\r\n\r\n") + sse(2, "b"), 0, 2),
    (sse(1, "a") + b"data: x\r\r\n" + sse(2, "b"), 0, 2),
])
def test_last_seq_of_a_run_in_the_proxys_form(run: bytes, after: int, seq: int) -> None:
    assert NUMBERED.last_seq(run, after) == seq


@pytest.mark.parametrize(("run", "after"), [
    (sse(2, "a"), 0),  # not the next seq
    (sse(1, "a") + NOTICE, 0),  # the run ends in an unnumbered block
    (NOTICE + sse(1, "a"), 0),  # it starts with one
    (b"id: ub_other:1\ndata: a\n\n", 0),  # another stream
    (sse(None, f'{{"t":"x\\nid: {SID}:1"}}'), 0),  # an id only inside data
    (sse(1, "a") + sse(None, "b").replace(b"data", b"id: " + SID.encode() + b":2x\ndata"), 0),
    (sse(1, "a") + sse(0, "b"), 0),  # the last seq goes back
    (sse(1, "a") + b"\n", 0),  # a blank line last: the decoder's to read
    (b"data: a\n\n", 0),
    (sse(7, "a").replace(b":7\n", b":007\n"), 6),  # not as the proxy writes a seq
    (sse(1, "a") + sse(2, "b").replace(b"data", b"data: x\rdata"), 0),  # a CR in the last block
    (sse(1, "a") + sse(2, "b\r"), 0),
    (sse(1, "a") + b"data: x\r\r" + sse(2, "b"), 0),  # the last id line follows a CR
    (b"data: x\r\r" + sse(1, "a"), 0),  # a CR before the first id: it ends a block first
    (sse(1, "a\r"), 0),  # one frame, with a CR
])
def test_last_seq_is_none_for_anything_else(run: bytes, after: int) -> None:
    assert NUMBERED.last_seq(run, after) is None
