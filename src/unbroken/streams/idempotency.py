"""Idempotent create: a POST with ``Idempotency-Key`` starts at most one generation.

The same credential with the same key attaches to the stream the key created (live, or ended
and still retained), from its first frame, with no upstream request: a double click, a client's
retry or a browser library re-POSTing on a tab switch is not billed twice. The same key with a
different request (path or body) is a mistake and gets 422.

Only hashes are kept: of (credential hash, key), so a key is scoped to its credential and
useless to anyone else, and of (path, body). Requests without a credential ignore the key (a
stream they create is readable with its token only, and a key alone must not grant it).

Two requests with one key can arrive together, before the first has created its stream;
``PendingKeys`` makes the second wait for the first instead of racing it upstream.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Mapping

from ..resumption import IDEMPOTENCY_KEY
from .access import secret_hash

__all__ = ["IDEMPOTENCY_HEADER", "PendingKeys", "idempotency_hash", "key_hash", "request_hash"]

IDEMPOTENCY_HEADER = IDEMPOTENCY_KEY.lower()  # how a Starlette request's headers name it


def idempotency_hash(headers: Mapping[str, str], credential_hash: str | None) -> str | None:
    """The hash naming (credential, key), or ``None`` without a key or a credential."""
    key = headers.get(IDEMPOTENCY_HEADER, "").strip()
    if not key or credential_hash is None:
        return None
    return key_hash(credential_hash, key)


def key_hash(credential_hash: str, key: str) -> str:
    """The hash naming an idempotency key of one credential (or one app stream owner)."""
    return secret_hash(f"idempotency\x00{credential_hash}\x00{key}")


def request_hash(path: str, body: bytes) -> str:
    """The hash of what was asked: the path (no query: Gemini's ``key=`` lives there) and the
    body, as canonical JSON when it is JSON (key order and spacing differ between clients that
    send the same request: an SDK's retry and a hand-written one)."""
    try:
        canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":"),
                               ensure_ascii=False).encode()
    except (ValueError, RecursionError):
        canonical = body
    digest = hashlib.sha256(b"unbroken-request\x00" + path.encode() + b"\x00")
    digest.update(canonical)
    return digest.hexdigest()


class PendingKeys:
    """Keys whose first request is still creating its stream, in this process."""

    def __init__(self) -> None:
        self._pending: dict[str, asyncio.Future[str | None]] = {}

    def claim(self, key_hash: str) -> asyncio.Future[str | None] | None:
        """``None`` if this request goes first (it must ``settle`` the key); otherwise the
        future of the first one's stream id (``None`` when it made no stream)."""
        waiting = self._pending.get(key_hash)
        if waiting is not None:
            return waiting
        self._pending[key_hash] = asyncio.get_running_loop().create_future()
        return None

    def settle(self, key_hash: str, stream_id: str | None) -> None:
        future = self._pending.pop(key_hash, None)
        if future is not None and not future.done():
            future.set_result(stream_id)
