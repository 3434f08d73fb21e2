"""The app of the ``unbroken.server`` tests: a Starlette app whose streams come from sources of
every kind, in a thread (``build_app``) or as a process (``python -m tests.integration.server_app
--port P --store URL``).

``POST /start?kind=K&n=N&interval=S&owner=O&key=IDEMPOTENCY&id=STREAM_ID`` starts a stream and
answers ``{"stream_id", "token", "created"}`` (409/429/503 with the refusal); ``GET
/s/{id}/events?owner=O`` is ``streams.response``; ``GET /s/{id}`` and ``POST /s/{id}/cancel``;
``GET /runs`` counts the sources this process started and closed; ``streams.app`` is mounted at
``/streams`` and ``/v1/streams`` (owner: the ``x-owner`` header). Kinds: ``str``, ``dict``,
``sse``, ``events`` (normalized events ending with a ``Finish`` of ``truncated``/``length``),
``astream`` and ``sdk`` (a tracked OpenAI chat stream from the mock at ``$UNBROKEN_TEST_MOCK``),
``raise``, ``never``, ``unsupported``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

import unbroken
from unbroken.events import Finish, TextDelta
from unbroken.finish import FinishReason, Status
from unbroken.framing import ServerSentEvent
from unbroken.server import ResumableStreams, StreamRefusedError

RUNS: Counter[str] = Counter()  # "started" / "closed" sources of this process


async def _counted(values: AsyncIterator[Any]) -> AsyncIterator[Any]:
    RUNS["started"] += 1
    try:
        async for value in values:
            yield value
    finally:
        RUNS["closed"] += 1


async def _values(kind: str, n: int, interval: float) -> AsyncIterator[Any]:
    for i in range(1, n + 1):
        if interval:
            await asyncio.sleep(interval)
        if kind == "str":
            yield f"t{i}\r\n✓ "
        elif kind == "dict":
            yield {"i": i, "text": f"d{i}"}
        elif kind == "sse":
            yield ServerSentEvent(event="tick", data=f"line {i}\nsecond line")
        elif kind == "events":
            yield TextDelta(seq=i, text=f"e{i} ")
        elif kind == "raise":
            if i == 3:
                raise RuntimeError("the model backend said no")
            yield f"r{i}"
        elif kind == "unsupported":
            yield 42 if i == 2 else f"u{i}"
    if kind == "events":
        yield Finish(seq=n + 1, status=Status.TRUNCATED, reason=FinishReason.LENGTH,
                     raw="length")
    if kind == "never":
        await asyncio.Event().wait()
        yield "unreachable"


def _source(kind: str, n: int, interval: float, sdk: Any) -> Any:
    mock = os.environ.get("UNBROKEN_TEST_MOCK", "")
    scenario = {"unbroken-mock": f"seed=3; tokens={n}; finish=length; delay_ms="
                                 f"{int(interval * 1000)}"}
    body = {"model": "gpt-test", "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}
    if kind == "astream":
        return unbroken.astream("POST", mock + "/v1/chat/completions", dialect="openai-chat",
                                json=body, headers=scenario)
    if kind == "sdk":
        return _sdk_stream(sdk, scenario)
    return _counted(_values(kind, n, interval))


async def _sdk_stream(client: Any, headers: dict[str, str]) -> Any:
    stream = await client.chat.completions.create(
        model="gpt-test", stream=True, messages=[{"role": "user", "content": "hi"}],
        extra_headers=headers)
    return unbroken.from_openai(stream)


def build_app(store: str, **options: Any) -> tuple[Starlette, ResumableStreams]:
    from openai import AsyncOpenAI

    streams = ResumableStreams(store, owner_of=lambda request: request.headers.get("x-owner"),
                               **options)
    sdk: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        mock = os.environ.get("UNBROKEN_TEST_MOCK", "http://127.0.0.1:9")
        async with AsyncOpenAI(base_url=mock + "/v1", api_key="sk-test",
                               max_retries=0) as client:
            sdk["client"] = client
            async with streams.lifespan(app):
                yield

    async def start(request: Request) -> Response:
        q = request.query_params
        kind = q.get("kind", "str")
        source = _source(kind, int(q.get("n", "5")), float(q.get("interval", "0")),
                         sdk.get("client"))
        if kind == "sdk":
            source = await source
        try:
            handle = await streams.start(source, owner=q.get("owner", "alice"),
                                         idempotency_key=q.get("key"), stream_id=q.get("id"))
        except StreamRefusedError as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.status)
        return JSONResponse({"stream_id": handle.stream_id, "token": handle.token,
                             "created": handle.created})

    async def events(request: Request) -> Response:
        return streams.response(request.path_params["stream_id"], request,
                                owner=request.query_params.get("owner"))

    async def runs(request: Request) -> Response:
        return JSONResponse(dict(RUNS))

    app = Starlette(routes=[
        Route("/start", start, methods=["POST"]),
        Route("/s/{stream_id}/events", events, methods=["GET"]),
        Route("/runs", runs, methods=["GET"]),
        Route("/healthz", lambda request: JSONResponse({"ok": True}), methods=["GET"]),
        Mount("/streams", app=streams.app),
        Mount("/v1/streams", app=streams.app),  # where unbroken.js looks for streams
    ], lifespan=lifespan)
    return app, streams


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--lease-ttl", type=float, default=2.0)
    args = parser.parse_args()
    app, _streams = build_app(args.store, lease_ttl=args.lease_ttl,
                              lease_renew=args.lease_ttl / 4, keepalive=1.0)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
