"""OpenAI chat's usage request: how the proxy asks for usage, and which chunk answers it."""

from __future__ import annotations

import json

import pytest

from unbroken.dialects.openai_chat import is_usage_only_chunk, with_usage_requested


def test_a_body_without_stream_options_gets_it_first_and_keeps_every_other_byte() -> None:
    body = b'{"model": "m",  "stream": true, "messages": [{"role": "user", "content": "\\u4f60"}]}'
    asked = with_usage_requested(body)
    assert asked == (b'{"stream_options":{"include_usage":true},"model": "m",  "stream": true, '
                     b'"messages": [{"role": "user", "content": "\\u4f60"}]}')
    assert json.loads(asked)["stream_options"] == {"include_usage": True}


def test_leading_whitespace_is_kept() -> None:
    assert with_usage_requested(b' \n{"stream":true}') == (
        b' \n{"stream_options":{"include_usage":true},"stream":true}')


def test_stream_options_without_include_usage_is_completed() -> None:
    body = b'{"stream": true, "stream_options": {"include_obfuscation": false}, "n": 1.5}'
    assert with_usage_requested(body) == (
        b'{"stream":true,"stream_options":{"include_obfuscation":false,"include_usage":true},'
        b'"n":1.5}')
    assert with_usage_requested(b'{"stream": true, "stream_options": null}') == (
        b'{"stream":true,"stream_options":{"include_usage":true}}')


@pytest.mark.parametrize("body", [
    b'{"stream": true, "stream_options": {"include_usage": true}}',   # asked already
    b'{"stream": true, "stream_options": {"include_usage": false}}',  # said no: respected
    b'{"stream": false, "messages": []}',                              # not a stream
    b'{"messages": []}',                                               # not a stream either
    b'{"stream": true, "stream_options": "yes"}',                      # the upstream's 400
    b'{"stream": true, "stream_options": {}, "n": 1e400}',             # would not round-trip
    b'[{"stream": true}]',
    b'{"stream": true',                                                # not JSON
    b'\xef\xbb\xbf{"stream": true}',                                   # a BOM: left alone
    '{"stream": true}'.encode("utf-16"),
])
def test_bodies_left_alone(body: bytes) -> None:
    assert with_usage_requested(body) is None


def test_the_usage_only_chunk() -> None:
    usage = b'{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":1}}'
    assert is_usage_only_chunk(usage) is True
    for other in (b'{"choices":[{"index":0,"delta":{}}],"usage":{"prompt_tokens":1}}',
                  b'{"choices":[],"usage":null}', b'{"usage":{"prompt_tokens":1}}',
                  b"[DONE]", b"[]", b'{"choices":[]'):
        assert is_usage_only_chunk(other) is False, other
