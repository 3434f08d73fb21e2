"""How ``RedisJournal`` writes its records into Redis values, and reads them back.

Streams' meta and state are JSON in the stream's hash; frames are stream entries ``0-<seq>``
with fields ``d`` (data), ``e`` (event, absent for ``None``), ``t`` (text, absent when
empty) and ``a`` (receive time, ``repr`` of the epoch seconds; absent when unknown, read back as
``0.0``); a group commit's appends travel to the ``APPEND`` script as one string of netstrings
(``<length>:<bytes>``), which Lua splits with ``string.find`` and ``string.sub`` alone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ...finish import Status
from .records import FrameRecord, StreamMeta, StreamRecord, StreamState

__all__ = [
    "frame_from",
    "meta_from",
    "meta_json",
    "packed_appends",
    "record_from",
    "refusal",
    "split_prefix",
    "state_from",
    "state_json",
]

Entry = tuple[bytes, dict[bytes, bytes]]


def packed_appends(
    appends: Sequence[tuple[str, Sequence[FrameRecord], StreamState, bool]],
) -> bytes:
    """The ``APPEND`` script's argument: per append its stream id, its state (stored only when
    the last flag says so; else progress alone, which the frames tell), then its frames."""
    parts: list[bytes] = []
    # The frames of one append were mostly read at once: one receive time, formatted once.
    last_at, at_text = 0.0, b""
    for stream_id, frames, state, write in appends:
        parts += [stream_id.encode(), state_json(state).encode() if write else b"",
                  state.status.value.encode(), repr(state.updated).encode(),
                  b"1" if state.ended else b"0", b"%d" % len(frames)]
        for frame in frames:
            event = b"" if frame.event is None else b"=" + frame.event.encode()
            at = frame.at
            if at != last_at:
                last_at, at_text = at, repr(at).encode() if at else b""
            parts += [b"%d" % frame.seq, event, frame.data, frame.text.encode(), at_text]
    return b"".join(b"%d:%b" % (len(part), part) for part in parts)


def split_prefix(url: str) -> tuple[str, str]:
    """The URL for redis-py without our ``prefix`` parameter, and the prefix."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    prefix = next((value for name, value in query if name == "prefix"), "unbroken:")
    if not prefix or any(c in prefix for c in "{} "):
        raise ValueError(f"a Redis key prefix cannot be empty or hold braces or spaces: "
                         f"{prefix!r}")
    rest = urlencode([(name, value) for name, value in query if name != "prefix"])
    return urlunsplit(parts._replace(query=rest)), prefix


def refusal(error: Exception) -> Exception:
    """A refusal from a script as the exception the other journals raise for it."""
    message = str(error)
    if message.startswith(("EXISTS ", "NOSTREAM ")):
        return KeyError(message.partition(" ")[2])
    if message.startswith("BADSEQ "):
        return ValueError(message.partition(" ")[2])
    return error


def frame_from(entry: Entry) -> FrameRecord:
    entry_id, fields = entry
    event = fields.get(b"e")
    at = fields.get(b"a")
    return FrameRecord(
        int(bytes(entry_id).partition(b"-")[2]),
        None if event is None else event.decode(),
        fields[b"d"],
        fields.get(b"t", b"").decode(),
        0.0 if at is None else float(at),
    )


def meta_json(meta: StreamMeta) -> str:
    return json.dumps({
        "stream_id": meta.stream_id, "dialect": meta.dialect, "created": meta.created,
        "media_type": meta.media_type, "token_hash": meta.token_hash,
        "credential_hash": meta.credential_hash, "request_path": meta.request_path,
        "response_headers": [list(pair) for pair in meta.response_headers],
        "idempotency_hash": meta.idempotency_hash, "request_hash": meta.request_hash,
        "background": meta.background,
    }, separators=(",", ":"))


def meta_from(data: dict[str, Any]) -> StreamMeta:
    data["response_headers"] = tuple((name, value) for name, value in data["response_headers"])
    return StreamMeta(**data)


def state_json(state: StreamState) -> str:
    return json.dumps({
        "status": state.status.value, "updated": state.updated, "last_seq": state.last_seq,
        "finish_reason": state.finish_reason, "raw_finish_reason": state.raw_finish_reason,
        "usage": state.usage, "error": state.error, "upstream_requests": state.upstream_requests,
        "provider_id": state.provider_id,
    }, separators=(",", ":"))


def state_from(data: dict[str, Any]) -> StreamState:
    data["status"] = Status(data["status"])
    return StreamState(**data)


def record_from(meta: bytes, state: bytes, top: bytes, text: str = "") -> StreamRecord:
    """A stream from its hash's ``meta``, ``state`` and ``top``: a live stream's stored state
    is rewritten lazily, and ``top`` (its last frame's seq) always knows the last seq."""
    stored = state_from(json.loads(state))
    if stored.last_seq < int(top):
        stored = replace(stored, last_seq=int(top))
    return StreamRecord(meta=meta_from(json.loads(meta)), state=stored, text=text)
