"""ResumingTransport on bad input: refused resumes, bodies that do not continue, passthrough.

The real proxy never answers a resume with 401 or 410 and never serves another stream's frames,
so a small ASGI app under real uvicorn plays it here: its POST sends two numbered frames and the
proxy's notice (the body ended before the stream did); its events endpoint answers as the test
says. It records what each resume sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import openai
import pytest
from tests.servers import serve_in_thread

from unbroken import ResumingTransport, async_http_client, http_client
from unbroken.client import Deadlines, Retry
from unbroken.client.proxied_body import ResumeMismatch

pytestmark = pytest.mark.integration

SID = "ub_00112233445566778899aabb"
TOKEN = "ubt_secret-token"


def chunk(seq: int, text: str, finish: str | None = None) -> bytes:
    data = json.dumps({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                       "choices": [{"index": 0, "delta": {"content": text},
                                    "finish_reason": finish}]}, ensure_ascii=False)
    return f"id: {SID}:{seq}\ndata: {data}\n\n".encode()


FIRST = chunk(1, "你") + chunk(2, "好")
NOTICE = (b'data: {"error":{"message":"unbroken proxy: this response ended before stream '
          b'ub_00112233445566778899aabb did","type":"server_error","param":null,'
          b'"code":"stream_incomplete"}}\n\n')
REST = chunk(3, "!", "stop") + f"id: {SID}:4\ndata: [DONE]\n\n".encode()


class FakeProxy:
    """POST: two frames and the notice. GET .../events: ``answer`` (status, body)."""

    def __init__(self) -> None:
        self.answer: tuple[int, bytes] = (200, REST)
        self.resumes: list[dict[str, str]] = []
        self.ids = True  # whether the POST answers with the stream id and token
        # the POST's content-encoding header(s), if any
        self.encoding: bytes | list[bytes] | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        if scope["method"] == "POST":
            while (await receive()).get("more_body"):
                pass
            out = [(b"content-type", b"text/event-stream")]
            if self.ids:
                out += [(b"unbroken-stream-id", SID.encode()),
                        (b"unbroken-stream-token", TOKEN.encode())]
            encodings = [self.encoding] if isinstance(self.encoding, bytes) else self.encoding
            out += [(b"content-encoding", value) for value in encodings or ()]
            await send({"type": "http.response.start", "status": 200, "headers": out})
            await send({"type": "http.response.body", "body": FIRST, "more_body": True})
            await send({"type": "http.response.body", "body": NOTICE})
            return
        self.resumes.append({"path": scope["path"], **headers})
        status, body = self.answer
        kind = b"text/event-stream" if status == 200 else b"application/json"
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", kind)]})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, FakeProxy]]:
    fake = FakeProxy()
    with serve_in_thread(fake) as base_url:
        yield base_url, fake


@pytest.fixture
def fake(served: tuple[str, FakeProxy]) -> tuple[str, FakeProxy]:
    served[1].answer, served[1].resumes, served[1].ids = (200, REST), [], True
    served[1].encoding = None
    return served


def client() -> httpx2.Client:
    return http_client(retry=Retry(attempts=3, backoff=0.01, max_backoff=0.02),
                       deadlines=Deadlines(connect=5, idle=5, total=20), timeout=10)


def read(base: str) -> tuple[list[bytes], BaseException | None]:
    pieces: list[bytes] = []
    with client() as http, http.stream("POST", base + "/v1/chat/completions",
                                       json={"stream": True}) as response:
        try:
            for piece in response.iter_raw():
                pieces.append(piece)
        except Exception as exc:
            return pieces, exc
    return pieces, None


def sdk_text(base: str) -> tuple[str, BaseException | None]:
    text: list[str] = []
    with client() as http:
        sdk = openai.OpenAI(base_url=base + "/v1", api_key="sk-x", max_retries=0,
                            http_client=http)
        try:
            for c in sdk.chat.completions.create(model="m", messages=[], stream=True):
                text.append(c.choices[0].delta.content or "")
        except Exception as exc:
            return "".join(text), exc
    return "".join(text), None


def test_the_notice_is_replaced_by_the_rest_of_the_stream(fake: tuple[str, FakeProxy]) -> None:
    base, proxy = fake
    pieces, error = read(base)
    assert (b"".join(pieces), error) == (FIRST + REST, None)
    assert len(proxy.resumes) == 1
    sent = proxy.resumes[0]
    assert (sent["path"], sent["last-event-id"], sent["unbroken-stream-token"]) == (
        f"/v1/streams/{SID}/events", f"{SID}:2", TOKEN)
    assert "idempotency-key" not in sent
    assert sdk_text(base) == ("你好!", None)


@pytest.mark.parametrize("status", [404, 401, 410])
def test_a_refused_resume_raises_with_its_status_once(
    fake: tuple[str, FakeProxy], status: int
) -> None:
    base, proxy = fake
    proxy.answer = (status, b'{"error":{"message":"no such stream"}}')
    text, error = sdk_text(base)
    assert text == "你好"
    assert isinstance(error, httpx2.HTTPStatusError)
    assert error.response.status_code == status
    assert error.response.json() == {"error": {"message": "no such stream"}}
    assert len(proxy.resumes) == 1  # no retry loop


@pytest.mark.parametrize(("first", "got"), [
    (chunk(4, "x"), f"{SID}:4"),
    (b"id: ub_ffffffffffffffffffffffff:3\ndata: {}\n\n", "ub_ffffffffffffffffffffffff:3"),
])
def test_a_resume_that_does_not_continue_is_an_error_naming_both(
    fake: tuple[str, FakeProxy], first: bytes, got: str
) -> None:
    base, proxy = fake
    proxy.answer = (200, first + REST)
    pieces, error = read(base)
    assert b"".join(pieces) == FIRST  # nothing of the other body spliced in
    assert isinstance(error, ResumeMismatch)
    assert (error.expected, error.got) == (f"{SID}:3", got)
    assert f"expected frame {SID}:3, got {got}" in str(error)
    assert len(proxy.resumes) == 1


def test_an_ended_stream_ends_the_body_once(fake: tuple[str, FakeProxy]) -> None:
    base, proxy = fake
    proxy.answer = (204, b"")
    pieces, error = read(base)
    assert (b"".join(pieces), error) == (FIRST, None)
    assert len(proxy.resumes) == 1


def test_when_the_retries_are_spent_the_sdk_gets_the_notice(
    fake: tuple[str, FakeProxy]
) -> None:
    base, proxy = fake
    proxy.answer = (503, b'{"error":{"message":"busy"}}')
    text, error = sdk_text(base)
    assert text == "你好"
    assert isinstance(error, openai.APIError)
    assert "unbroken proxy: this response ended before stream" in str(error)
    assert len(proxy.resumes) == 3  # Retry.attempts connections without a frame


@pytest.mark.parametrize("odd", ["no stream id", "compressed"])
def test_a_response_that_is_not_a_plain_proxied_stream_passes_through(
    fake: tuple[str, FakeProxy], odd: str
) -> None:
    base, proxy = fake
    if odd == "no stream id":
        proxy.ids = False
    else:
        proxy.encoding = b"br"  # never decoded here: iter over the raw stream only
    inner = httpx2.HTTPTransport()
    transport = ResumingTransport(inner)
    request = httpx2.Request("POST", base + "/v1/chat/completions", json={"stream": True})
    response = transport.handle_request(request)
    try:
        assert type(response.stream).__module__.startswith("httpx2")  # the inner's own
        assert b"".join(response.stream) == FIRST + NOTICE  # type: ignore[arg-type]
    finally:
        response.close()
        transport.close()
    assert proxy.resumes == []


@pytest.mark.parametrize(("encodings", "carried"), [
    ([b"identity"], True), ([b"Identity "], True), ([b"identity", b"br"], False),
    ([b"br", b"identity"], False),
])
def test_only_an_identity_body_is_carried(
    fake: tuple[str, FakeProxy], encodings: list[bytes], carried: bool
) -> None:
    base, proxy = fake
    proxy.encoding = encodings
    transport = ResumingTransport(httpx2.HTTPTransport())
    request = httpx2.Request("POST", base + "/v1/chat/completions", json={"stream": True})
    response = transport.handle_request(request)
    try:
        assert type(response.stream).__module__.startswith("unbroken") is carried
    finally:
        response.close()
        transport.close()


def test_a_get_passes_through_untouched(fake: tuple[str, FakeProxy]) -> None:
    base, proxy = fake
    with client() as http:
        response = http.get(f"{base}/v1/streams/{SID}/events")
    assert (response.status_code, response.content) == (200, REST)
    assert "idempotency-key" not in proxy.resumes[0]


def test_a_client_of_another_http_library_is_told_so() -> None:
    with httpx.Client(transport=ResumingTransport()) as other:  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="httpx2 transport; this request is a httpx"):
            other.get("http://127.0.0.1:9/")


@pytest.mark.anyio
@pytest.mark.parametrize(("answer", "expected"), [
    ((200, REST), FIRST + REST),
    ((204, b""), FIRST),
    ((410, b"{}"), httpx2.HTTPStatusError),
    ((200, chunk(4, "x")), ResumeMismatch),
    ((503, b"{}"), FIRST + NOTICE),
])
async def test_the_async_client_ends_each_case_the_same_way(
    fake: tuple[str, FakeProxy], answer: tuple[int, bytes], expected: bytes | type[Exception]
) -> None:
    base, proxy = fake
    proxy.answer = answer
    pieces: list[bytes] = []
    async with async_http_client(
        retry=Retry(attempts=3, backoff=0.01, max_backoff=0.02),
        deadlines=Deadlines(connect=5, idle=5, total=20), timeout=10,
    ) as http, http.stream("POST", base + "/v1/chat/completions", json={}) as response:
        try:
            async for piece in response.aiter_raw():
                pieces.append(piece)
        except Exception as exc:
            assert isinstance(expected, type) and isinstance(exc, expected)
            assert b"".join(pieces) == FIRST
        else:
            assert b"".join(pieces) == expected
    assert len(proxy.resumes) == (3 if answer[0] == 503 else 1)
