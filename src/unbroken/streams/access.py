"""Who may read a stream: the credential that created it, or the holder of its stream token.

A credential is the secret of ``Authorization`` (the scheme word dropped), ``x-api-key``,
``x-goog-api-key`` or Gemini's ``key=`` query parameter; the same secret in any of these places
is the same credential. Only SHA-256 hashes are kept (with a domain prefix so a journal's hashes
are useless as plain SHA-256 lookups); comparisons are constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping

from ..resumption import LAST_EVENT_ID, STREAM_TOKEN_HEADER, valid_seq
from ..resumption import parse_event_id as parse_any_event_id
from .journal import StreamMeta, Tombstone

__all__ = [
    "CREDENTIAL_HEADERS",
    "TOKEN_HEADER",
    "TOKEN_PARAM",
    "credential_hash",
    "events_cursor",
    "may_read",
    "new_stream_id",
    "new_stream_token",
    "parse_event_id",
    "presented_secrets",
    "secret_hash",
]

CREDENTIAL_HEADERS = ("authorization", "x-api-key", "x-goog-api-key")
CREDENTIAL_PARAM = "key"
TOKEN_HEADER = STREAM_TOKEN_HEADER.lower()  # how a Starlette request's headers name it
TOKEN_PARAM = "token"
_STREAM_ID = re.compile(r"ub_[0-9a-f]{24}")


def secret_hash(secret: str) -> str:
    return hashlib.sha256(b"unbroken-secret\x00" + secret.encode()).hexdigest()


def _credentials(headers: Mapping[str, str], query: Mapping[str, str]) -> list[str]:
    found: list[str] = []
    for name in CREDENTIAL_HEADERS:
        value = headers.get(name)
        if value:
            scheme, _, rest = value.strip().partition(" ")
            secret = rest.strip() if name == "authorization" and rest else value.strip()
            if secret and scheme:
                found.append(secret)
    key = query.get(CREDENTIAL_PARAM)
    if key:
        found.append(key)
    return found


def credential_hash(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The hash of the request's credential (the first found), or ``None`` without one."""
    found = _credentials(headers, query)
    return secret_hash(found[0]) if found else None


def presented_secrets(headers: Mapping[str, str], query: Mapping[str, str]) -> list[str]:
    """Every secret a reader presents: credentials and stream tokens (header or ``?token=``)."""
    found = _credentials(headers, query)
    for token in (headers.get(TOKEN_HEADER), query.get(TOKEN_PARAM)):
        if token:
            found.append(token.strip())
    return found


def may_read(
    meta: StreamMeta | Tombstone, headers: Mapping[str, str], query: Mapping[str, str]
) -> bool:
    """True if a presented secret is the stream's token or the credential that created it."""
    allowed = [meta.token_hash]
    if meta.credential_hash is not None:
        allowed.append(meta.credential_hash)
    granted = False
    for secret in presented_secrets(headers, query):
        digest = secret_hash(secret)
        for expected in allowed:
            granted |= hmac.compare_digest(digest, expected)
    return granted


def new_stream_id() -> str:
    return "ub_" + secrets.token_hex(12)


def new_stream_token() -> str:
    # The prefix keeps a token from starting with "-" (1 in 64 of token_urlsafe's), which a
    # command line would read as an option: `unbroken inspect URL --token -x...` failed.
    return "ubt_" + secrets.token_urlsafe(32)


def parse_event_id(value: str | None) -> tuple[str, int] | None:
    """``(stream_id, seq)`` from a ``Last-Event-ID`` of this proxy (an event id whose stream id
    this proxy could have minted), else ``None``."""
    named = parse_any_event_id(value)
    return named if named is not None and _STREAM_ID.fullmatch(named[0]) else None


def events_cursor(
    stream_id: str, headers: Mapping[str, str], query: Mapping[str, str]
) -> int | None:
    """The seq to serve after: ``Last-Event-ID`` wins over ``?after=``; ``None`` if either is
    malformed or names another stream."""
    last_event_id = headers.get(LAST_EVENT_ID.lower())
    if last_event_id:
        named = parse_any_event_id(last_event_id)
        return named[1] if named is not None and named[0] == stream_id else None
    after = query.get("after")
    if after is None:
        return 0
    if not valid_seq(after):
        return None
    return int(after)
