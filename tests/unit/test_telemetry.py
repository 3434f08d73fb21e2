"""``unbroken.telemetry`` without a server: what each dialect is called in the GenAI
conventions, the request facts read from a URL and a body, and that nothing of OpenTelemetry is
imported (or paid) until ``instrument()`` is called."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from unbroken.dialects import DIALECTS, dialect_class
from unbroken.telemetry.observation import json_object, operation_name, request_model, server_of

# The conventions' well-known gen_ai.provider.name values (Ollama is not among them: its own
# name) and their gen_ai.operation.name per API.
GENAI = {
    "openai-chat": ("openai", "chat"),
    "openai-responses": ("openai", "chat"),
    "anthropic": ("anthropic", "chat"),
    "gemini": ("gcp.gemini", "generate_content"),
    "ollama": ("ollama", "chat"),
    "bedrock-converse": ("aws.bedrock", "chat"),
    "bedrock-invoke": ("aws.bedrock", "chat"),
}


def test_every_dialect_names_its_provider_and_operation() -> None:
    assert {cls.name: (cls.genai_provider, cls.genai_operation) for cls in DIALECTS} == GENAI


@pytest.mark.parametrize(("dialect", "url", "operation"), [
    ("ollama", "http://h:11434/api/generate", "text_completion"),
    ("ollama", "http://h:11434/api/chat", "chat"),
    ("gemini", "https://g/v1beta/models/x:streamGenerateContent?alt=sse", "generate_content"),
    ("openai-chat", None, "chat"),
])
def test_the_operation_follows_the_path(dialect: str, url: str | None, operation: str) -> None:
    assert operation_name(dialect_class(dialect), url) == operation


@pytest.mark.parametrize(("dialect", "url", "body", "model"), [
    ("openai-chat", "http://h/v1/chat/completions", b'{"model": "gpt-x", "stream": true}',
     "gpt-x"),
    ("gemini", "https://g/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
     b'{"contents": []}', "gemini-2.5-flash"),
    ("gemini", "https://g/v1beta/tunedModels/mine:streamGenerateContent", None, "mine"),
    ("bedrock-converse", "https://b/model/us.anthropic.claude-x%3A0/converse-stream",
     b'{"messages": []}', "us.anthropic.claude-x:0"),
    ("anthropic", "http://h/v1/messages", b'{"model": 7}', None),  # not a name
    ("anthropic", "http://h/v1/messages", b"{not json", None),
    ("anthropic", "http://h/v1/messages", b"[]", None),
    ("anthropic", "http://h/v1/messages", None, None),
])
def test_the_request_model_comes_from_the_path_or_the_body(
    dialect: str, url: str, body: bytes | None, model: str | None
) -> None:
    assert request_model(dialect_class(dialect), url, json_object(body)) == model


@pytest.mark.parametrize(("url", "server"), [
    ("https://api.openai.com/v1/chat/completions", ("api.openai.com", 443)),
    ("http://127.0.0.1:8000/v1/messages", ("127.0.0.1", 8000)),
    ("http://[::1]:9/x", ("::1", 9)),
    ("http://h:bad/x", ("h", None)),
    (None, (None, None)),
])
def test_server_address_and_port(url: str | None, server: tuple[str | None, int | None]) -> None:
    assert server_of(url) == server


SCRIPT = """
import sys
{block}
import unbroken
from unbroken import telemetry
from unbroken.client import opening
from unbroken.sdk import from_openai
{imports}
body = (b'data: {{"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{{"index":0,"delta":{{"content":"Hi"}},"finish_reason":"stop"}}]}}\\n\\n')
session = opening.open_session(
    "POST", "http://127.0.0.1:9/v1/chat/completions", dialect="openai-chat", json={{}},
    content=None, headers=None, retry=None, resume="none", connect_timeout=1,
    first_event_timeout=1, idle_timeout=1, total_timeout=None, capture=None, trace=True)
session.on_response(200, {{"content-type": "text/event-stream"}})
assert [e.text for e in session.receive(body, 0.0) if hasattr(e, "text")] == ["Hi"]
session.on_eof(0.0)
session.finish(raise_on_error=True)
assert session.observation is None and not telemetry.instrumented()
print(sorted(name for name, module in sys.modules.items()
             if name.split(".")[0] == "opentelemetry" and module is not None))
{after}
"""


@pytest.mark.parametrize("installed", [True, False])
def test_nothing_of_opentelemetry_is_imported_until_instrument(installed: bool) -> None:
    """With the extra installed and without it (``opentelemetry`` made unimportable), importing
    unbroken and running a stream imports no opentelemetry module; ``instrument()`` without the
    extra says which extra to install. (The proxy and the server are imported only in the
    second case: redis, which their journals import, loads the OpenTelemetry SDK itself when
    that is installed.)"""
    block = "" if installed else "sys.modules['opentelemetry'] = None"
    imports = "" if installed else \
        "from unbroken.proxy import create_app\nfrom unbroken.server import ResumableStreams"
    after = textwrap.dedent("""
        try:
            telemetry.instrument()
        except ImportError as exc:
            print(exc)
    """) if not installed else ""
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(block=block, imports=imports, after=after)],
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "[]"
    if not installed:
        assert lines[1:] == ["unbroken.telemetry needs opentelemetry-api: "
                             "pip install 'unbroken[otel]'"]


def test_each_chunk_buffer_is_bounded_and_written_mid_stream() -> None:
    """With ``chunk_intervals="each"`` an observation holds at most ``HELD_INTERVALS`` intervals:
    a full buffer is written at once with the request's attributes, the rest at the end with
    the response's model too; frames of one read are points of zero. Nothing is lost."""
    from tests.otel_support import recording

    from unbroken import telemetry
    from unbroken.events import MessageStart
    from unbroken.message import Message
    from unbroken.telemetry.observation import HELD_INTERVALS

    url = "http://127.0.0.1:9/v1/chat/completions"
    with recording(chunk_intervals="each") as recorded:
        observation = telemetry.observe("client", dialect=dialect_class("openai-chat"), url=url,
                                        body=b'{"model": "m"}', started=0.0)
        assert observation is not None
        observation.output(1.0, 3)  # the first chunk and two more in the same read
        for n in range(1, HELD_INTERVALS + 1):
            observation.output(1.0 + n * 0.5)
        [mid] = recorded.points("gen_ai.client.operation.time_per_output_chunk")
        request = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                   "gen_ai.request.model": "m", "server.address": "127.0.0.1",
                   "server.port": 9}
        assert (mid.count, mid.sum) == (HELD_INTERVALS + 2, HELD_INTERVALS * 0.5)
        assert dict(mid.attributes or {}) == request
        assert len(observation.intervals or ()) == observation.same_read == 0
        observation.output(1.0 + (HELD_INTERVALS + 1) * 0.5, 2)
        message = Message()
        message.commit(1, [MessageStart(seq=1, id="r", model="m-1")], 1.0)
        message.close()
        observation.end(message, t=9999.0)
    points = {tuple(sorted(dict(p.attributes or {}))): (p.count, p.sum)
              for p in recorded.points("gen_ai.client.operation.time_per_output_chunk")}
    assert points == {
        tuple(sorted(request)): (HELD_INTERVALS + 2, HELD_INTERVALS * 0.5),
        tuple(sorted({**request, "gen_ai.response.model": "m-1", "error.type": "interrupted"})):
            (2, 0.5),
    }


def test_a_request_body_is_read_once_as_a_json_object() -> None:
    assert json_object(b'{"model": "m", "n": [1]}') == {"model": "m", "n": [1]}
    for body in (None, b"", b"[]", b"{not json", b'"text"', b"\xff{"):
        assert json_object(body) is None
