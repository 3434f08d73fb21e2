"""``create_app(ProxyConfig(...))``: the proxy as a Starlette ASGI app.

Routes
------
=========================================  ==================================================
``GET  /healthz``                          200 once the journal is open and the client ready
``GET  /v1/streams/{id}``                  status, finish reason, text, last seq, usage, error
``POST /v1/streams/{id}/cancel``           stop the generation (status ``cancelled``)
``GET  /v1/streams/{id}/events``           SSE with ids for any dialect; ``Last-Event-ID`` or
                                           ``?after=``; ``?token=`` for ``EventSource``
anything else                              forwarded to its provider's origin; the streaming
                                           endpoints are journaled and resumable
=========================================  ==================================================
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import httpx2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..finish import Status
from .access import (
    credential_hash,
    may_read,
    new_stream_id,
    new_stream_token,
    parse_event_id,
    secret_hash,
)
from .config import ProxyConfig
from .journal import Journal, StreamMeta, StreamRecord, StreamState, journal_for
from .logs import install_redaction
from .replay import events_cursor, stream_response
from .routing import Endpoint, endpoint_for, request_headers, response_headers, wants_stream
from .upstream import Producer, UpstreamRequest
from .wire import downstream_for, error_body, error_frame

__all__ = ["ProxyApp", "create_app"]

log = logging.getLogger("unbroken.proxy")


class ProxyApp:
    """The proxy's state (journal, upstream client, live producers) and its request handlers."""

    def __init__(self, config: ProxyConfig, journal: Journal | None = None) -> None:
        self.config = config
        self.journal = journal or journal_for(config.store, tail_frames=config.tail_frames)
        self.producers: dict[str, Producer] = {}
        self.ready = False
        self._client: httpx2.AsyncClient | None = None

    @property
    def client(self) -> httpx2.AsyncClient:
        if self._client is None:
            raise RuntimeError("the proxy is not running (lifespan not started)")
        return self._client

    # -- lifespan -----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        config = self.config
        install_redaction()
        await self.journal.open()
        await self._recover()
        self._client = httpx2.AsyncClient(
            timeout=httpx2.Timeout(
                connect=config.connect_timeout, read=config.read_timeout,
                write=config.read_timeout, pool=None,
            ),
            limits=httpx2.Limits(max_connections=None, max_keepalive_connections=200),
            follow_redirects=False,
            trust_env=False,
        )
        expiry = asyncio.get_running_loop().create_task(self._expire_forever())
        self.ready = True
        try:
            yield
        finally:
            self.ready = False
            expiry.cancel()
            producers = list(self.producers.values())
            for producer in producers:
                producer.stop("shutdown")
            tasks = [producer.task for producer in producers if producer.task is not None]
            if tasks:
                await asyncio.wait(tasks)
            await self._client.aclose()
            self._client = None
            await self.journal.close()

    async def _recover(self) -> None:
        """Streams left unfinished by a previous process end ``interrupted`` with an error
        frame (one proxy process per journal file; leases for more come later)."""
        for stream_id in await self.journal.unfinished():
            record = await self.journal.get(stream_id, with_text=False)
            if record is None:
                continue
            seq = record.state.last_seq + 1
            message = "unbroken proxy: the proxy restarted while the stream was live"
            frame = error_frame(record.meta.dialect, seq, "proxy_restarted", message)
            state = replace(
                record.state, status=Status.INTERRUPTED, updated=time.time(), last_seq=seq,
                error={"type": "proxy_restarted", "message": message},
            )
            await self.journal.append(stream_id, [frame], state)
            log.warning("stream %s: marked interrupted (left unfinished by a restart)", stream_id)

    async def _expire_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.expire_every)
            try:
                gone = await self.journal.expire(time.time() - self.config.retention)
            except Exception:
                log.exception("journal expiry failed")
                continue
            if gone:
                log.info("expired %d stream(s)", gone)

    # -- proxy endpoints ----------------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        if not self.ready:
            return JSONResponse({"status": "starting"}, status_code=503)
        return JSONResponse({"status": "ok", "live_streams": len(self.producers)})

    async def stream_status(self, request: Request) -> Response:
        record = await self._readable(request, with_text=True)
        if record is None:
            return _not_found()
        return JSONResponse(record.summary())

    async def cancel(self, request: Request) -> Response:
        record = await self._readable(request, with_text=False)
        if record is None:
            return _not_found()
        stream_id = record.meta.stream_id
        producer = self.producers.get(stream_id)
        if producer is not None and producer.task is not None:
            producer.stop("cancelled")
            await asyncio.wait([producer.task])
        elif not record.state.ended:  # left unfinished by a previous process
            await self.journal.set_status(
                stream_id, replace(record.state, status=Status.CANCELLED, updated=time.time())
            )
        after = await self.journal.get(stream_id, with_text=True)
        assert after is not None
        return JSONResponse(after.summary())

    async def events(self, request: Request) -> Response:
        stream_id = request.path_params["stream_id"]
        eventsource = "text/event-stream" in request.headers.get("accept", "")
        record = await self.journal.get(stream_id, with_text=False)
        if record is None or not may_read(record.meta, request.headers, request.query_params):
            return _not_found()
        if self._expired(record):
            return Response(status_code=204) if eventsource else _not_found()
        after = events_cursor(stream_id, request.headers, request.query_params)
        if after is None:
            return JSONResponse(
                {"error": {"message": "Last-Event-ID or ?after= does not name a seq of this "
                                      "stream", "type": "invalid_request_error"}},
                status_code=400,
            )
        if record.state.ended and after >= record.state.last_seq:
            return Response(status_code=204)  # nothing more will come: an EventSource stops
        downstream = downstream_for(record.meta.dialect, record.meta.media_type,
                                    events_endpoint=True, retry_ms=self.config.retry_ms)
        return stream_response(self.journal, stream_id, after, downstream,
                               keepalive=self.config.keepalive)

    # -- forwarding ---------------------------------------------------------------------------

    async def forward(self, request: Request) -> Response:
        endpoint = endpoint_for(request.method, request.url.path, request.headers)
        if endpoint.dialect is None:
            # Not a streaming endpoint: the body goes upstream as it arrives (uploads stay
            # unbuffered), with the client's Content-Length, or none if it sent no body.
            has_body = "content-length" in request.headers or (
                "transfer-encoding" in request.headers)
            return await self._pass_through(
                request, endpoint, request.stream() if has_body else None)
        body = await request.body()
        if not wants_stream(endpoint, body, request.query_params):
            return await self._pass_through(request, endpoint, body)
        resume = parse_event_id(request.headers.get("last-event-id"))
        if resume is not None:
            return await self._resume(request, endpoint, *resume)
        return await self._start(request, endpoint, body)

    async def _start(self, request: Request, endpoint: Endpoint, body: bytes) -> Response:
        assert endpoint.dialect is not None
        origin = self.config.origin(endpoint.provider)
        upstream = UpstreamRequest(
            url=origin + _target(request),
            headers=request_headers(request.headers.items(), identity=True),
            body=body,
            origin=origin,
            background=endpoint.dialect == "openai-responses" and _background(body),
        )
        try:
            response = await self.client.send(
                self.client.build_request("POST", upstream.url, headers=upstream.headers,
                                          content=body),
                stream=True,
            )
        except httpx2.HTTPError as exc:
            return _upstream_unreachable(endpoint, exc)
        content_type = response.headers.get("content-type", "")
        if not 200 <= response.status_code < 300 or not endpoint.streams_as(content_type):
            return _relay(response)
        now = time.time()
        token = new_stream_token()
        forwarded = response_headers(response.headers.multi_items(), reencoded=True)
        meta = StreamMeta(
            stream_id=new_stream_id(),
            dialect=endpoint.dialect,
            created=now,
            media_type=content_type,
            token_hash=secret_hash(token),
            credential_hash=credential_hash(request.headers, request.query_params),
            request_path=request.url.path,
            response_headers=tuple(
                (name, value) for name, value in forwarded
                if name.lower() not in ("set-cookie", "content-type")
            ),
        )
        try:
            tail = await self.journal.create(meta, StreamState(status=Status.PENDING, updated=now))
        except BaseException:
            await response.aclose()
            raise
        producer = Producer(journal=self.journal, client=self.client, config=self.config,
                            meta=meta, tail=tail, request=upstream, response=response)
        self.producers[meta.stream_id] = producer
        producer.start().add_done_callback(
            lambda _task: self.producers.pop(meta.stream_id, None)
        )
        log.info("stream %s: %s %s", meta.stream_id, endpoint.dialect, request.url.path)
        downstream = downstream_for(endpoint.dialect, content_type, events_endpoint=False,
                                    retry_ms=self.config.retry_ms)
        return stream_response(
            self.journal, meta.stream_id, 0, downstream, keepalive=self.config.keepalive,
            status_code=response.status_code,
            headers=[*forwarded, ("unbroken-stream-token", token)],
        )

    async def _resume(self, request: Request, endpoint: Endpoint, stream_id: str,
                      after: int) -> Response:
        """A re-POST with ``Last-Event-ID``: the frames after it, no upstream request."""
        record = await self.journal.get(stream_id, with_text=False)
        if (
            record is None
            or not may_read(record.meta, request.headers, request.query_params)
            or self._expired(record)
        ):
            return JSONResponse(
                error_body(endpoint.dialect, 404, f"unbroken proxy: no stream {stream_id}"),
                status_code=404,
            )
        downstream = downstream_for(record.meta.dialect, record.meta.media_type,
                                    events_endpoint=False, retry_ms=self.config.retry_ms)
        return stream_response(
            self.journal, stream_id, after, downstream, keepalive=self.config.keepalive,
            headers=list(record.meta.response_headers),
        )

    async def _pass_through(self, request: Request, endpoint: Endpoint,
                            body: bytes | AsyncIterator[bytes] | None) -> Response:
        url = self.config.origin(endpoint.provider) + _target(request)
        headers = request_headers(request.headers.items(), identity=False)
        length = request.headers.get("content-length")
        if length is not None and body is not None and not isinstance(body, bytes):
            headers.append(("content-length", length))
        try:
            response = await self.client.send(
                self.client.build_request(request.method, url, headers=headers, content=body),
                stream=True,
            )
        except httpx2.HTTPError as exc:
            return _upstream_unreachable(endpoint, exc)
        return _relay(response)

    # -- access -------------------------------------------------------------------------------

    async def _readable(self, request: Request, *, with_text: bool) -> StreamRecord | None:
        record = await self.journal.get(request.path_params["stream_id"], with_text=with_text)
        if record is None or not may_read(record.meta, request.headers, request.query_params):
            return None
        return None if self._expired(record) else record

    def _expired(self, record: StreamRecord) -> bool:
        if self.journal.tail(record.meta.stream_id) is not None:
            return False
        return record.state.updated < time.time() - self.config.retention


def _target(request: Request) -> str:
    """The request's path and query exactly as received (the upstream sees them unchanged)."""
    raw_path: bytes = request.scope.get("raw_path") or request.url.path.encode()
    query: bytes = request.scope.get("query_string", b"")
    return (raw_path + (b"?" + query if query else b"")).decode("latin-1")


def _background(body: bytes) -> bool:
    try:
        payload = json.loads(body)
    except ValueError:
        return False
    return isinstance(payload, dict) and payload.get("background") is True


def _not_found() -> Response:
    return JSONResponse(
        {"error": {"message": "no such stream (unknown, expired, or not yours)",
                   "type": "not_found"}},
        status_code=404,
    )


def _upstream_unreachable(endpoint: Endpoint, exc: Exception) -> Response:
    message = f"unbroken proxy: the upstream is unreachable: {exc!r}"
    return JSONResponse(error_body(endpoint.dialect, 502, message), status_code=502)


def _relay(response: httpx2.Response) -> Response:
    """The upstream's answer passed through untouched (status, headers, raw body)."""

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_raw():
                yield chunk
        finally:
            await response.aclose()

    relayed = StreamingResponse(body(), status_code=response.status_code)
    relayed.raw_headers = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in response_headers(response.headers.multi_items(), reencoded=False)
    ]
    return relayed


def create_app(config: ProxyConfig | None = None, *, journal: Journal | None = None) -> Starlette:
    """The proxy as an ASGI app; ``journal`` overrides the one ``config.store`` names."""
    proxy = ProxyApp(config or ProxyConfig(), journal)
    routes = [
        Route("/healthz", proxy.healthz, methods=["GET"]),
        Route("/v1/streams/{stream_id}", proxy.stream_status, methods=["GET"]),
        Route("/v1/streams/{stream_id}/cancel", proxy.cancel, methods=["POST"]),
        Route("/v1/streams/{stream_id}/events", proxy.events, methods=["GET"]),
        Route("/{path:path}", proxy.forward,
              methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]),
    ]
    app = Starlette(routes=routes, lifespan=proxy.lifespan)
    app.state.proxy = proxy
    return app
