"""The ``Idempotency-Key`` a POST carries: one per call, the same across the SDK's own retries.

The official SDKs built by Stainless (openai, anthropic) number each attempt of one call in
``x-stainless-retry-count`` (0 for the first); a retry is the same request again. So a first
attempt gets a new random key, and a retry gets the key of the last first attempt with the same
method, URL and body *in the same context*: a retry runs in its call's thread or task, and a
``ContextVar`` set there is seen only there, so a second call made deliberately (attempt 0
again) or in another task never shares a key. A request without that header is a first attempt.
"""

from __future__ import annotations

import itertools
import os
import secrets
from contextvars import ContextVar

import httpx2

__all__ = ["IDEMPOTENCY_HEADER", "RETRY_COUNT_HEADER", "keyed"]

IDEMPOTENCY_HEADER = "idempotency-key"
RETRY_COUNT_HEADER = "x-stainless-retry-count"
_IDEMPOTENCY, _RETRY_COUNT = IDEMPOTENCY_HEADER.encode(), RETRY_COUNT_HEADER.encode()
_REMEMBERED = 16  # first attempts remembered per context (a retry follows its call at once)

# (fingerprint, key) pairs of this context's latest first attempts, newest last. Immutable:
# a copy of the context (a new task) must not see keys its siblings add later.
_keys: ContextVar[tuple[tuple[int, str], ...]] = ContextVar("unbroken_idempotency_keys",
                                                            default=())
_prefix = secrets.token_hex(8)
_counter = itertools.count()


def _reseed() -> None:
    global _prefix, _counter
    _prefix = secrets.token_hex(8)
    _counter = itertools.count()


if hasattr(os, "register_at_fork"):  # a forked worker must not repeat its parent's keys
    os.register_at_fork(after_in_child=_reseed)


def keyed(request: httpx2.Request) -> bool:
    """Give a POST with a JSON body in memory its ``Idempotency-Key`` (unless it has one);
    True if it has one now. Uploads and streamed bodies are left alone, unread."""
    if request.method != "POST":
        return False
    # One pass over the raw headers: every Headers lookup scans them all (this runs per call).
    retry = b""
    for name, value in request.headers.raw:
        name = name.lower()
        if name == _IDEMPOTENCY:
            return True
        if name == _RETRY_COUNT:
            retry = value
    if not isinstance(request.stream, httpx2.ByteStream):
        return False
    body = request.content
    if not body.lstrip()[:1] == b"{":
        return False
    fingerprint = hash((request.method, str(request.url), body))
    remembered = _keys.get()
    if retry.isdigit() and int(retry) > 0:
        for known, key in reversed(remembered):
            if known == fingerprint:
                request.headers[IDEMPOTENCY_HEADER] = key
                return True
    key = f"ub-{_prefix}{next(_counter):016x}"
    _keys.set((*remembered[-(_REMEMBERED - 1):], (fingerprint, key)))
    request.headers[IDEMPOTENCY_HEADER] = key
    return True
