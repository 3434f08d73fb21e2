"""Connection and data faults over a real server, read with a raw socket and with httpx2."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx2
import pytest

from unbroken.mock import reply_deltas

pytestmark = pytest.mark.integration

PATHS = {
    "openai-chat": ("/v1/chat/completions", b"\n\n"),
    "openai-responses": ("/v1/responses", b"\n\n"),
    "anthropic": ("/v1/messages", b"\n\n"),
    "gemini": ("/v1beta/models/g:streamGenerateContent?alt=sse", b"\r\n\r\n"),
    "ollama": ("/api/chat", b"\n"),
}
# The frame number of the first text frame, per dialect (see unbroken.mock's docstring).
FIRST_TEXT = {"openai-chat": 2, "openai-responses": 5, "anthropic": 4, "gemini": 1, "ollama": 1}


@dataclass(frozen=True)
class RawResponse:
    head: bytes
    reads: list[bytes]  # what each recv() returned, headers included
    chunks: list[bytes]  # the chunked-encoding chunks, in order
    terminated: bool  # the zero-length last chunk arrived
    read_cuts: list[int]  # body offsets where each recv() but the last ended

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)


def raw_post(base_url: str, path: str, scenario: str, headers: dict[str, str] | None = None,
             body: bytes = b'{"stream": true}') -> RawResponse:
    """POST over a plain socket, read to EOF, and take the chunked encoding apart by hand."""
    url = urlsplit(base_url)
    assert url.hostname is not None and url.port is not None
    lines = [f"POST {path} HTTP/1.1", f"Host: {url.netloc}", "Content-Type: application/json",
             f"Content-Length: {len(body)}", "Connection: close", f"Unbroken-Mock: {scenario}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    reads = []
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall("\r\n".join(lines).encode() + b"\r\n\r\n" + body)
        for _ in range(100_000):
            data = sock.recv(65536)
            if not data:
                break
            reads.append(data)
    raw = b"".join(reads)
    head, _, _ = raw.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    position = len(head) + 4
    chunks: list[bytes] = []
    payload_spans = []  # (raw start, raw end) of each chunk's payload
    terminated = False
    while position < len(raw):
        line_end = raw.index(b"\r\n", position)
        size = int(raw[position:line_end], 16)
        position = line_end + 2
        if size == 0:
            terminated = raw[position:] == b"\r\n"
            break
        assert raw[position + size : position + size + 2] == b"\r\n", "a chunk was cut"
        payload_spans.append((position, position + size))
        chunks.append(raw[position : position + size])
        position += size + 2
    # Where each recv() ended, counted in body bytes (chunk framing left out).
    read_cuts, received = [], 0
    for data in reads[:-1]:
        received += len(data)
        read_cuts.append(sum(min(max(received - start, 0), stop - start)
                             for start, stop in payload_spans))
    return RawResponse(head=head, reads=reads, chunks=chunks, terminated=terminated,
                       read_cuts=read_cuts)


def frames_of(body: bytes, separator: bytes) -> list[bytes]:
    parts = body.split(separator)
    return [part + separator for part in parts[:-1]]


def clean(base_url: str, name: str, scenario: str) -> list[bytes]:
    path, separator = PATHS[name]
    response = raw_post(base_url, path, scenario)
    assert response.terminated
    return frames_of(response.body, separator)


@pytest.mark.parametrize("name", list(PATHS))
def test_a_clean_stream_ends_with_the_terminating_chunk(mock_server: str, name: str) -> None:
    response = raw_post(mock_server, PATHS[name][0], "tokens=3")
    assert response.head.startswith(b"HTTP/1.1 200 OK")
    assert response.terminated
    assert b"".join(response.reads).endswith(b"\r\n0\r\n\r\n")


@pytest.mark.parametrize("name", list(PATHS))
def test_drop_after_closes_without_the_terminating_chunk(mock_server: str, name: str) -> None:
    path, _separator = PATHS[name]
    frames = clean(mock_server, name, "tokens=4")
    response = raw_post(mock_server, path, "tokens=4; drop_after=3")
    assert not response.terminated
    assert not b"".join(response.reads).endswith(b"0\r\n\r\n")
    assert response.body == b"".join(frames[:3])
    with pytest.raises(httpx2.RemoteProtocolError, match="incomplete chunked read"):
        httpx2.post(mock_server + path, json={"stream": True}, timeout=5,
                    headers={"Unbroken-Mock": "tokens=4; drop_after=3"})


@pytest.mark.parametrize("name", list(PATHS))
def test_drop_mid_cuts_the_next_text_frame_inside_a_character(mock_server: str,
                                                              name: str) -> None:
    path, _separator = PATHS[name]
    first_text = FIRST_TEXT[name]
    frames = clean(mock_server, name, "tokens=4")
    scenario = f"tokens=4; drop_after={first_text}; drop_mid=1"
    response = raw_post(mock_server, path, scenario)
    assert not response.terminated
    body = response.body
    head = b"".join(frames[:first_text])
    assert body.startswith(head)
    tail = body[len(head) :]
    cut_frame = frames[first_text]  # frame first_text + 1, a text frame
    assert cut_frame.startswith(tail)
    assert 0 < len(tail) < len(cut_frame)
    assert tail[-1] >= 0xC0  # ends with the lead byte of a multi-byte character
    with pytest.raises(UnicodeDecodeError, match="unexpected end of data"):
        tail.decode()
    # Everything up to the cut is in the text: the cut falls in the frame's first delta character.
    delta = reply_deltas(0, 4)[1]
    first_multibyte = next(char for char in delta if ord(char) > 0x7F)
    assert tail.endswith(first_multibyte.encode()[:1])


def test_drop_mid_in_a_frame_without_multibyte_characters_cuts_its_middle(
    mock_server: str,
) -> None:
    frames = clean(mock_server, "openai-chat", "tokens=2")
    response = raw_post(mock_server, "/v1/chat/completions", "tokens=2; drop_after=4; drop_mid=1")
    assert response.body == b"".join(frames[:4]) + frames[4][: len(frames[4]) // 2]
    assert frames[4] == b"data: [DONE]\n\n"


def test_drop_after_zero_and_after_the_last_frame(mock_server: str) -> None:
    path = PATHS["anthropic"][0]
    nothing = raw_post(mock_server, path, "tokens=2; drop_after=0")
    assert nothing.head.startswith(b"HTTP/1.1 200 OK")
    assert nothing.chunks == []
    assert not nothing.terminated
    frames = clean(mock_server, "anthropic", "tokens=2")
    everything = raw_post(mock_server, path, f"tokens=2; drop_after={len(frames)}")
    assert everything.body == b"".join(frames)
    assert not everything.terminated


@pytest.mark.parametrize("name", list(PATHS))
def test_split_utf8_chunks_cut_inside_characters(mock_server: str, name: str) -> None:
    path, _separator = PATHS[name]
    frames = clean(mock_server, name, "tokens=6")
    response = raw_post(mock_server, path, "tokens=6; split_utf8=1")
    assert response.terminated
    assert response.body == b"".join(frames)
    # Each write is its own HTTP chunk: more chunks than frames, and some end mid-character.
    assert len(response.chunks) > 2 * len(frames)
    mid_character = [chunk for chunk in response.chunks if not _is_utf8(chunk)]
    assert len(mid_character) >= 6
    # Best effort on the reads (the kernel may coalesce): at least one ends inside a character.
    body = response.body
    assert any(0x80 <= body[cut] < 0xC0 for cut in response.read_cuts if cut < len(body))


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.parametrize(("name", "keepalive"), [
    ("openai-chat", b": keep-alive\n\n"),
    ("anthropic", b'event: ping\ndata: {"type": "ping"}\n\n'),
    ("gemini", b": keep-alive\r\n\r\n"),
])
def test_pings_before_frames_and_during_a_stall(mock_server: str, name: str,
                                                keepalive: bytes) -> None:
    path, _separator = PATHS[name]
    frames = clean(mock_server, name, "tokens=3")
    scenario = "tokens=3; pings=1; ping_ms=40; stall_after=2; stall_s=0.2"
    response = raw_post(mock_server, path, scenario)
    assert response.terminated
    # One before every frame but the first, and ceil(200 / 40) - 1 = 4 during the stall.
    expected = frames[0] + keepalive + frames[1] + keepalive * 4
    expected += b"".join(keepalive + frame for frame in frames[2:])
    assert response.body == expected


def test_pings_are_a_no_op_for_ndjson(mock_server: str) -> None:
    frames = clean(mock_server, "ollama", "tokens=3")
    response = raw_post(mock_server, "/api/chat", "tokens=3; pings=1; delay_ms=5")
    assert response.body == b"".join(frames)


def test_stall_holds_the_stream_until_the_client_gives_up(mock_server: str) -> None:
    frames = clean(mock_server, "openai-chat", "tokens=3")
    received = b""
    # The read timeout only has to be shorter than the 30 s stall; a shorter one could fire in a
    # scheduling pause between the first frames on a loaded machine.
    timeout = httpx2.Timeout(5, read=2)
    with httpx2.Client(timeout=timeout) as client:
        with client.stream("POST", mock_server + "/v1/chat/completions",
                           content=b'{"stream": true}',
                           headers={"Unbroken-Mock": "tokens=3; stall_after=2; stall_s=30"}
                           ) as response:
            with pytest.raises(httpx2.ReadTimeout):
                for chunk in response.iter_raw():
                    received += chunk
    assert received == frames[0] + frames[1]
    # The stalled handler noticed the disconnect: the server still answers at once.
    assert httpx2.get(mock_server + "/_mock/requests", timeout=5).json() == {
        "generations": {"/v1/chat/completions": 2}, "resumes": {}}


def test_stall_after_zero_sends_headers_and_no_frame(mock_server: str) -> None:
    timeout = httpx2.Timeout(5, read=2)  # well short of the 30 s stall
    with httpx2.Client(timeout=timeout) as client:
        with client.stream("POST", mock_server + "/v1/messages", json={"stream": True},
                           headers={"Unbroken-Mock": "stall_after=0; stall_s=30"}) as response:
            assert response.status_code == 200
            with pytest.raises(httpx2.ReadTimeout):
                response.read()


def test_delay_changes_no_byte(mock_server: str) -> None:
    frames = clean(mock_server, "gemini", "tokens=3")
    response = raw_post(mock_server, PATHS["gemini"][0], "tokens=3; delay_ms=10")
    assert response.body == b"".join(frames)


@pytest.mark.parametrize(("name", "error_at", "check"), [
    ("openai-chat", 3, b'data: {"error":{"message":'),
    ("openai-responses", 6, b"event: error\ndata: {\"type\":\"error\",\"sequence_number\":5,"),
    ("anthropic", 5, b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error"'),
    ("gemini", 2, b'data: {"error": {"code": 500,'),
    ("ollama", 2, b'{"error":"'),
])
def test_error_at_is_the_last_frame(mock_server: str, name: str, error_at: int,
                                    check: bytes) -> None:
    path, separator = PATHS[name]
    frames = clean(mock_server, name, "tokens=4")
    response = raw_post(mock_server, path, f"tokens=4; error_at={error_at}")
    assert response.terminated
    got = frames_of(response.body, separator)
    assert len(got) == error_at
    assert got[: error_at - 1] == frames[: error_at - 1]
    assert got[-1].startswith(check)


@pytest.mark.parametrize("name", list(PATHS))
def test_malformed_json_and_invalid_utf8(mock_server: str, name: str) -> None:
    path, separator = PATHS[name]
    number = max(FIRST_TEXT[name], 2)
    frames = clean(mock_server, name, "tokens=3")
    scenario = f"tokens=3; malformed_json_at=1; invalid_utf8_at={number}"
    response = raw_post(mock_server, path, scenario)
    got = frames_of(response.body, separator)
    assert len(got) == len(frames)
    assert got[0] == frames[0][: -len(separator) - 1] + separator
    with pytest.raises(ValueError):
        json.loads(got[0].removeprefix(b"data: ").split(b"data: ")[-1])
    assert b"\xff" in got[number - 1]
    with pytest.raises(UnicodeDecodeError):
        got[number - 1].decode()
    assert [frame for index, frame in enumerate(got) if index not in (0, number - 1)] == [
        frame for index, frame in enumerate(frames) if index not in (0, number - 1)]


def test_duplicate_repeats_a_responses_frame(mock_server: str) -> None:
    frames = clean(mock_server, "openai-responses", "tokens=3")
    response = raw_post(mock_server, "/v1/responses", "tokens=3; duplicate=6")
    got = frames_of(response.body, b"\n\n")
    assert got == [*frames[:6], frames[5], *frames[6:]]
    numbers = [json.loads(frame.split(b"data: ", 1)[1])["sequence_number"] for frame in got]
    assert numbers == [0, 1, 2, 3, 4, 5, 5, 6, 7, 8, 9, 10]
