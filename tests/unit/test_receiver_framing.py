"""``StreamReceiver(framing=...)``: a dialect's frames in the other framing (Ollama as SSE)."""

from __future__ import annotations

import pytest

from unbroken._receiver import StreamReceiver
from unbroken.errors import PayloadError
from unbroken.finish import FinishReason, Status
from unbroken.framing import SSE

LINES = [
    '{"model":"m","message":{"role":"assistant","content":"你"},"done":false}',
    '{"model":"m","message":{"role":"assistant","content":"好"},"done":false}',
    '{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop"}',
]


def test_ollama_lines_served_as_sse_with_proxy_ids() -> None:
    body = "".join(f"id: ub_x:{n}\ndata: {line}\n\n" for n, line in enumerate(LINES, 1)).encode()
    receiver = StreamReceiver("ollama", framing=SSE)
    frames = [f for i in range(len(body)) for f in receiver.receive_data(body[i : i + 1])]
    receiver.receive_eof()
    assert [f.seq for f in frames] == [1, 2, 3]
    assert receiver.stream_id == "ub_x"
    message = receiver.message
    assert (message.status, message.finish_reason, message.text) == (
        Status.COMPLETED, FinishReason.STOP, "你好"
    )


def test_malformed_json_in_an_ollama_sse_frame_fails_with_payload_error() -> None:
    receiver = StreamReceiver("ollama", framing=SSE)
    receiver.receive_data(f"data: {LINES[0]}\n\ndata: {{nope\n\n".encode())
    message = receiver.message
    assert message.status is Status.FAILED
    assert isinstance(message.error, PayloadError)
    assert message.text == "你"


def test_unknown_framing_is_refused() -> None:
    with pytest.raises(ValueError, match="framing must be a Framing"):
        StreamReceiver("ollama", framing="xml")  # type: ignore[arg-type]
