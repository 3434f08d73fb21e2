"""Who may read an app stream: its owner (kept only as a hash) or the holder of its token;
and what ``get`` and ``GET /{id}`` tell of it (no hashes)."""

from __future__ import annotations

import hmac
from typing import Any

from ..streams.access import secret_hash
from ..streams.journal import StreamRecord

__all__ = ["may_read", "owner_hash", "same_owner", "summary"]


def owner_hash(owner: str) -> str:
    """How an owner is kept: a hash apart from the proxy's credential hashes."""
    return secret_hash("app-owner\x00" + owner)


def may_read(token_hash: str, credential_hash: str | None, who: str | None,
             token: str | None) -> bool:
    """Whether the owner hash or the token is the stream's (constant-time comparisons)."""
    granted = False
    if who is not None and credential_hash is not None:
        granted |= hmac.compare_digest(who, credential_hash)
    if token:
        granted |= hmac.compare_digest(secret_hash(token.strip()), token_hash)
    return granted


def same_owner(a: str | None, b: str) -> bool:
    return a is not None and hmac.compare_digest(a, b)


def summary(record: StreamRecord) -> dict[str, Any]:
    """The JSON of ``get`` and ``GET /{id}``: no hashes."""
    meta, state = record.meta, record.state
    return {"id": meta.stream_id, "status": state.status.value,
            "finish_reason": state.finish_reason,
            "raw_finish_reason": state.raw_finish_reason, "error": state.error,
            "text": record.text, "last_seq": state.last_seq, "created": meta.created,
            "updated": state.updated}
