"""What every provider format module shares: the plan of a reply, frames, and their encoding.

A provider module turns a ``Plan`` into a list of ``Frame`` values (one SSE event or one NDJSON
line each) and into the whole non-streaming body. ``encode`` writes a frame as wire bytes. The
mock writes these bytes itself; it never uses the library's own parsers or dialects.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = [
    "CREATED",
    "Dialect",
    "Frame",
    "Framing",
    "Plan",
    "compact_json",
    "encode",
    "go_json",
    "spaced_json",
]

# A fixed creation time, so that the same request always streams the same bytes.
CREATED = 1_735_689_600


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """What one generation says; everything in the stream follows from it."""

    model: str
    ident: str
    deltas: tuple[str, ...]
    finish: str
    include_usage: bool = False
    background: bool = False

    @property
    def text(self) -> str:
        return "".join(self.deltas)


@dataclass(frozen=True, slots=True, kw_only=True)
class Frame:
    """One SSE event (``event`` may be None) or one NDJSON line; ``data`` is the payload."""

    data: bytes
    event: str | None = None
    sequence_number: int | None = None


class Framing(Enum):
    SSE = "sse"
    SSE_CRLF = "sse-crlf"
    NDJSON = "ndjson"


def encode(frame: Frame, framing: Framing, frame_id: int | None = None) -> bytes:
    """The frame's bytes on the wire, with an ``id:`` line first when ``frame_id`` is given."""
    if framing is Framing.NDJSON:
        return frame.data + b"\n"
    eol = b"\r\n" if framing is Framing.SSE_CRLF else b"\n"
    lines = []
    if frame_id is not None:
        lines.append(b"id: %d" % frame_id)
    if frame.event is not None:
        lines.append(b"event: " + frame.event.encode())
    lines.append(b"data: " + frame.data)
    return eol.join(lines) + eol + eol


def compact_json(value: Any) -> bytes:
    """JSON as OpenAI and Anthropic send it: no spaces, UTF-8 kept raw."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def spaced_json(value: Any) -> bytes:
    """JSON as Gemini sends it: a space after each colon, none after commas."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ": ")).encode()


_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
               "\u2029": "\\u2029"}


def go_json(value: Any) -> bytes:
    """JSON as Go's encoding/json writes it (Ollama): compact, HTML characters escaped."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    # These characters only occur inside JSON strings, so a plain replace is exact.
    for char, escape in _GO_ESCAPES.items():
        text = text.replace(char, escape)
    return text.encode()


@dataclass(frozen=True, slots=True, kw_only=True)
class Dialect:
    """One provider format: how it frames, streams, answers whole, and reports errors."""

    name: str
    framing: Framing
    media_type: str
    keepalive: bytes
    dumps: Callable[[Any], bytes]
    finishes: frozenset[str]
    stream_frames: Callable[[Plan], list[Frame]]
    whole_body: Callable[[Plan], tuple[int, dict[str, Any]]]
    error_frame: Callable[[int], Frame]
    error_body: Callable[[int, str], dict[str, Any]]
