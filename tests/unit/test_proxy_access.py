"""Credentials, stream tokens and ids: who may read a stream."""

from __future__ import annotations

import hashlib

from unbroken.streams.access import (
    credential_hash,
    may_read,
    new_stream_id,
    new_stream_token,
    parse_event_id,
    presented_secrets,
    secret_hash,
)
from unbroken.streams.journal import StreamMeta


def meta(credential: str | None, token: str) -> StreamMeta:
    return StreamMeta(
        stream_id="ub_" + "0" * 24,
        dialect="openai-chat",
        created=0.0,
        media_type="text/event-stream",
        token_hash=secret_hash(token),
        credential_hash=None if credential is None else secret_hash(credential),
    )


def test_secret_hash_is_a_prefixed_sha256_never_the_secret() -> None:
    digest = secret_hash("sk-test-1")
    assert digest == hashlib.sha256(b"unbroken-secret\x00sk-test-1").hexdigest()
    assert digest != hashlib.sha256(b"sk-test-1").hexdigest()
    assert "sk-test-1" not in digest


def test_the_same_secret_in_any_place_is_the_same_credential() -> None:
    expected = secret_hash("K1")
    assert credential_hash({"authorization": "Bearer K1"}, {}) == expected
    assert credential_hash({"x-api-key": "K1"}, {}) == expected
    assert credential_hash({"x-goog-api-key": " K1 "}, {}) == expected
    assert credential_hash({}, {"key": "K1"}) == expected
    assert credential_hash({"user-agent": "x"}, {}) is None
    assert credential_hash({"authorization": "Bearer"}, {}) == secret_hash("Bearer")


def test_presented_secrets_include_stream_tokens() -> None:
    headers = {"authorization": "Bearer A", "unbroken-stream-token": "T1"}
    assert presented_secrets(headers, {"token": "T2", "key": "G"}) == ["A", "G", "T1", "T2"]


def test_may_read_with_the_credential_or_the_token_only() -> None:
    stream = meta("K1", "TOK")
    assert may_read(stream, {"authorization": "Bearer K1"}, {})
    assert may_read(stream, {"x-api-key": "K1"}, {})
    assert may_read(stream, {}, {"token": "TOK"})
    assert may_read(stream, {"unbroken-stream-token": "TOK"}, {})
    assert may_read(stream, {"authorization": "Bearer TOK"}, {})
    assert not may_read(stream, {"authorization": "Bearer K2"}, {})
    assert not may_read(stream, {}, {"token": "TOK2"})
    assert not may_read(stream, {}, {})


def test_a_stream_created_without_credential_needs_its_token() -> None:
    stream = meta(None, "TOK")
    assert not may_read(stream, {"authorization": "Bearer anything"}, {})
    assert not may_read(stream, {}, {})
    assert may_read(stream, {}, {"token": "TOK"})


def test_ids_and_tokens_are_fresh_and_well_formed() -> None:
    ids = {new_stream_id() for _ in range(100)}
    tokens = {new_stream_token() for _ in range(100)}
    assert len(ids) == 100 and len(tokens) == 100
    for stream_id in ids:
        assert parse_event_id(f"{stream_id}:5") == (stream_id, 5)
    assert all(len(token) >= 40 for token in tokens)


def test_parse_event_id() -> None:
    sid = "ub_0123456789abcdef01234567"
    assert parse_event_id(f"{sid}:0") == (sid, 0)
    assert parse_event_id(f" {sid}:42 ") == (sid, 42)
    assert parse_event_id(None) is None
    assert parse_event_id("") is None
    assert parse_event_id("17") is None  # a provider's own id: not this proxy's
    assert parse_event_id(f"{sid}:") is None
    assert parse_event_id(f"{sid}:-1") is None
    assert parse_event_id(f"{sid}:\uff11") is None  # a non-ASCII digit
    assert parse_event_id("ub_xyz:3") is None
    assert parse_event_id(f"{sid}:{2**63 - 1}") == (sid, 2**63 - 1)
    assert parse_event_id(f"{sid}:{2**63}") is None  # past a journal's 64-bit seq
    assert parse_event_id(f"{sid}:" + "9" * 30) is None


def test_a_stream_token_never_reads_as_a_command_line_option() -> None:
    # token_urlsafe starts with "-" once in 64; `unbroken inspect URL --token -x...` then failed.
    tokens = {new_stream_token() for _ in range(2000)}
    assert len(tokens) == 2000
    assert all(token.startswith("ubt_") and len(token) == 47 for token in tokens)
