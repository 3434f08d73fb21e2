"""``create_app(ProxyConfig(...))``: the proxy as a Starlette ASGI app.

Routes
------
=========================================  ==================================================
``GET  /healthz``                          200 once the journal is open and the client ready
                                           (503 before, and while draining on shutdown)
``GET  /metrics``                          Prometheus text: streams, frames, resumes, errors
``GET  /v1/streams/{id}``                  status, finish reason, text, last seq, usage, error
``POST /v1/streams/{id}/cancel``           stop the generation (status ``cancelled``)
``GET  /v1/streams/{id}/events``           SSE with ids for any dialect; ``Last-Event-ID`` or
                                           ``?after=``; ``?token=`` for ``EventSource``
anything else                              forwarded to its provider's origin; the streaming
                                           endpoints are journaled and resumable
=========================================  ==================================================

Hardening (see each module): ``Idempotency-Key`` attaches a repeated create to its stream
(``idempotency.py``); producers hold leases and dead ones' streams are recovered, Responses
background ones re-attached upstream by their owner (``lease.py``, ``reattach.py``); limits
refuse with their status (``limits.py``); SIGTERM drains (``shutdown.py``); ``metrics.py``.
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
from starlette.responses import JSONResponse, Response
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
from .idempotency import PendingKeys, idempotency_hash, request_hash
from .journal import Journal, StreamMeta, StreamRecord, StreamState, journal_for
from .lease import LeaseKeeper, Recovery, reattachable
from .limits import DRAINING, Refusal, StreamSlots, body_refusal, read_body
from .logs import install_redaction, log_event
from .metrics import CONTENT_TYPE, ProxyMetrics
from .reattach import continue_upstream
from .relay import not_found, relay, target, upstream_unreachable
from .replay import events_cursor, stream_response
from .routing import Endpoint, endpoint_for, request_headers, response_headers, wants_stream
from .upstream import Producer, UpstreamRequest
from .wire import Downstream, downstream_for, error_body, error_frame

__all__ = ["ProxyApp", "create_app"]

log = logging.getLogger("unbroken.proxy")


class ProxyApp:
    """The proxy's state (journal, upstream client, live producers) and its request handlers."""

    def __init__(self, config: ProxyConfig, journal: Journal | None = None) -> None:
        self.config = config
        self.journal = journal or journal_for(config.store, tail_frames=config.tail_frames)
        self.producers: dict[str, Producer] = {}
        self.ready = False
        self.draining = False
        self._client: httpx2.AsyncClient | None = None
        self.metrics = ProxyMetrics()
        self.journal.observer = self.metrics
        self.slots = StreamSlots(max_streams=config.max_streams,
                                 max_streams_per_key=config.max_streams_per_key)
        self.pending_keys = PendingKeys()
        self.leases = LeaseKeeper(self.journal, ttl=config.lease_ttl,
                                  renew_every=config.lease_renew)
        self.recovery = Recovery(self.journal, self.leases)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain: asyncio.Task[None] | None = None

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
        self._loop = asyncio.get_running_loop()
        self._drain = None
        self.draining = False
        await self.recovery.startup()
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
        renewal = asyncio.get_running_loop().create_task(self.leases.run())
        self.ready = True
        log_event("proxy.ready", owner=self.leases.owner, store=config.store.partition(":")[0])
        try:
            yield
        finally:
            self.ready = False
            await self.begin_drain()
            expiry.cancel()
            renewal.cancel()
            self.recovery.close()
            await self._client.aclose()
            self._client = None
            await self.journal.close()

    def begin_drain_threadsafe(self) -> None:
        """``begin_drain`` from a signal handler (or any thread)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.begin_drain)

    def begin_drain(self) -> asyncio.Task[None]:
        """Stop taking new streams; live ones get ``shutdown_grace`` seconds to end, then are
        stopped (``interrupted``, with their error frame). The task ends when all have."""
        if self._drain is None:
            self.draining = True
            log_event("proxy.draining", live_streams=len(self.producers),
                      grace_s=self.config.shutdown_grace)
            self._drain = asyncio.get_running_loop().create_task(self._drain_streams())
        return self._drain

    async def _drain_streams(self) -> None:
        running = [p.task for p in self.producers.values() if p.task is not None]
        if running:
            await asyncio.wait(running, timeout=self.config.shutdown_grace)
        left = list(self.producers.values())
        for producer in left:
            producer.stop("shutdown")
        running = [p.task for p in left if p.task is not None and not p.task.done()]
        if running:
            await asyncio.wait(running)
        log_event("proxy.drained", stopped=len(left))

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
        if not self.ready or self.draining:
            status = "draining" if self.draining else "starting"
            return JSONResponse({"status": status}, status_code=503)
        return JSONResponse({"status": "ok", "live_streams": len(self.producers)})

    async def metrics_text(self, request: Request) -> Response:
        readers = 0
        for stream_id in self.producers:
            tail = self.journal.tail(stream_id)
            readers += tail.readers if tail is not None else 0
        text = self.metrics.render(active_streams=len(self.producers), readers=readers)
        return Response(text, media_type=CONTENT_TYPE)

    async def stream_status(self, request: Request) -> Response:
        record = await self._readable(request, with_text=True)
        if record is None:
            return not_found()
        return JSONResponse(record.summary())

    async def cancel(self, request: Request) -> Response:
        record = await self._readable(request, with_text=False)
        if record is None:
            return not_found()
        stream_id = record.meta.stream_id
        producer = self.producers.get(stream_id)
        if producer is not None and producer.task is not None:
            producer.stop("cancelled")
            await asyncio.wait([producer.task])
        elif not record.state.ended or reattachable(record):
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
            return not_found()
        record = await self._settled(stream_id, with_text=False, wait=True) or record
        if self._expired(record):
            return Response(status_code=204) if eventsource else not_found()
        after = events_cursor(stream_id, request.headers, request.query_params)
        if after is None:
            return JSONResponse(
                {"error": {"message": "Last-Event-ID or ?after= does not name a seq of this "
                                      "stream", "type": "invalid_request_error"}},
                status_code=400,
            )
        refused = await self._reattach(record, request)
        if refused is not None:
            return self._refuse(refused, None)
        record = await self.journal.get(stream_id, with_text=False) or record
        if after:
            self.metrics.resumes += 1
        downstream = downstream_for(record.meta.dialect, record.meta.media_type,
                                    events_endpoint=True, retry_ms=self.config.retry_ms)
        trailer = _unjournaled_end(record, downstream)
        if record.state.ended and after >= record.state.last_seq and trailer is None:
            return Response(status_code=204)  # nothing more will come: an EventSource stops
        return stream_response(self.journal, stream_id, after, downstream,
                               keepalive=self.config.keepalive, trailer=trailer)

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
        max_body = self.config.max_body
        body = body_refusal(request.headers.get("content-length"), max_body) or (
            await read_body(request.stream(), max_body))
        if isinstance(body, Refusal):
            return self._refuse(body, endpoint.dialect)
        if not wants_stream(endpoint, body, request.query_params):
            return await self._pass_through(request, endpoint, body)
        resume = parse_event_id(request.headers.get("last-event-id"))
        if resume is not None:
            return await self._resume(request, endpoint, *resume)
        return await self._start(request, endpoint, body)

    async def _start(self, request: Request, endpoint: Endpoint, body: bytes) -> Response:
        """A new stream, unless its Idempotency-Key names one: then that stream, from its
        first frame (422 if the key came with another request)."""
        credential = credential_hash(request.headers, request.query_params)
        key = idempotency_hash(request.headers, credential)
        if key is None:
            response, _stream_id = await self._create(request, endpoint, body, credential)
            return response
        asked = request_hash(request.url.path, body)
        while (waiting := self.pending_keys.claim(key)) is not None:
            await asyncio.shield(waiting)  # the first request with this key is creating it
        created: str | None = None
        try:
            found = await self.journal.find_idempotent(key)
            if found is not None and not self._expired(found):
                created = found.meta.stream_id
                return await self._attach(found, asked, endpoint)
            response, created = await self._create(request, endpoint, body, credential,
                                                   idempotency=(key, asked))
            return response
        finally:
            self.pending_keys.settle(key, created)

    async def _attach(self, record: StreamRecord, asked: str, endpoint: Endpoint) -> Response:
        if record.meta.request_hash != asked:
            return self._refuse(Refusal(
                status=422, message="unbroken proxy: this Idempotency-Key was used with a "
                                    "different request"), endpoint.dialect)
        self.metrics.idempotent_attaches += 1
        stream_id = record.meta.stream_id
        await self._settled(stream_id, with_text=False, wait=True)
        log_event("stream.attach", stream_id=stream_id, reason="idempotency_key")
        downstream = downstream_for(record.meta.dialect, record.meta.media_type,
                                    events_endpoint=False, retry_ms=self.config.retry_ms)
        return stream_response(
            self.journal, stream_id, 0, downstream, keepalive=self.config.keepalive,
            headers=[*record.meta.response_headers, ("idempotent-replayed", "true")],
        )

    async def _create(
        self, request: Request, endpoint: Endpoint, body: bytes, credential: str | None,
        idempotency: tuple[str, str] | None = None,
    ) -> tuple[Response, str | None]:
        assert endpoint.dialect is not None
        refused = DRAINING if self.draining else self.slots.take(credential)
        if refused is not None:
            return self._refuse(refused, endpoint.dialect), None
        origin = self.config.origin(endpoint.provider)
        upstream = UpstreamRequest(
            url=origin + target(request),
            headers=request_headers(request.headers.items(), identity=True),
            body=body,
            origin=origin,
            background=endpoint.dialect == "openai-responses" and _background(body),
        )
        producer: Producer | None = None
        try:
            sent = time.perf_counter()
            try:
                response = await self.client.send(
                    self.client.build_request("POST", upstream.url, headers=upstream.headers,
                                              content=body),
                    stream=True,
                )
            except httpx2.HTTPError as exc:
                self.metrics.upstream_errors["unreachable"] += 1
                return upstream_unreachable(endpoint, exc), None
            latency = time.perf_counter() - sent
            self.metrics.upstream_seconds.observe(latency)
            content_type = response.headers.get("content-type", "")
            if not 200 <= response.status_code < 300 or not endpoint.streams_as(content_type):
                self.metrics.upstream_errors["status"] += response.status_code >= 400
                log_event("upstream.answer", level=logging.WARNING, path=request.url.path,
                          status=response.status_code, upstream_ms=round(latency * 1000, 3))
                return relay(response), None
            now = time.time()
            token = new_stream_token()
            forwarded = response_headers(response.headers.multi_items(), reencoded=True)
            meta = StreamMeta(
                stream_id=new_stream_id(),
                dialect=endpoint.dialect,
                created=now,
                media_type=content_type,
                token_hash=secret_hash(token),
                credential_hash=credential,
                request_path=request.url.path,
                response_headers=tuple(
                    (name, value) for name, value in forwarded
                    if name.lower() not in ("set-cookie", "content-type")
                ),
                idempotency_hash=None if idempotency is None else idempotency[0],
                request_hash=None if idempotency is None else idempotency[1],
                background=upstream.background,
            )
            try:
                tail = await self.journal.create(
                    meta, StreamState(status=Status.PENDING, updated=now), self.leases.lease())
            except BaseException:
                await response.aclose()
                raise
            producer = Producer(journal=self.journal, client=self.client, config=self.config,
                                meta=meta, tail=tail, request=upstream, response=response)
            self._run(producer, credential)
        finally:
            if producer is None:
                self.slots.give_back(credential)
        self.metrics.streams_started += 1
        log_event("stream.start", stream_id=meta.stream_id, dialect=endpoint.dialect,
                  path=request.url.path, upstream_status=response.status_code,
                  upstream_ms=round(latency * 1000, 3), background=upstream.background or None)
        downstream = downstream_for(endpoint.dialect, content_type, events_endpoint=False,
                                    retry_ms=self.config.retry_ms)
        return stream_response(
            self.journal, meta.stream_id, 0, downstream, keepalive=self.config.keepalive,
            status_code=response.status_code,
            headers=[*forwarded, ("unbroken-stream-token", token)],
        ), meta.stream_id

    def _run(self, producer: Producer, credential: str | None) -> None:
        """Start a producer; its slot and its place in ``producers`` go when it ends."""
        stream_id = producer.stream_id
        self.producers[stream_id] = producer

        def ended(_task: asyncio.Task[None]) -> None:
            self.producers.pop(stream_id, None)
            self.slots.give_back(credential)

        producer.start().add_done_callback(ended)

    async def _resume(self, request: Request, endpoint: Endpoint, stream_id: str,
                      after: int) -> Response:
        """A re-POST with ``Last-Event-ID``: the frames after it, no upstream request (unless
        the stream is a background one to re-attach upstream for its owner)."""
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
        record = await self._settled(stream_id, with_text=False, wait=True) or record
        refused = await self._reattach(record, request)
        if refused is not None:
            return self._refuse(refused, endpoint.dialect)
        record = await self.journal.get(stream_id, with_text=False) or record
        self.metrics.resumes += 1
        downstream = downstream_for(record.meta.dialect, record.meta.media_type,
                                    events_endpoint=False, retry_ms=self.config.retry_ms)
        return stream_response(
            self.journal, stream_id, after, downstream, keepalive=self.config.keepalive,
            headers=list(record.meta.response_headers),
            trailer=_unjournaled_end(record, downstream),
        )

    async def _reattach(self, record: StreamRecord, request: Request) -> Refusal | None:
        """Continue a background stream left by a dead producer, if this is its owner."""
        if not reattachable(record) or self.draining:
            return None
        credential = credential_hash(request.headers, request.query_params)
        if credential is None or credential != record.meta.credential_hash:
            return None  # a token holder reads what is stored; only the owner can pay
        refused = self.slots.take(credential)
        if refused is not None:
            return refused
        producer = None
        try:
            producer = await continue_upstream(
                journal=self.journal, client=self.client, config=self.config, record=record,
                headers=request_headers(request.headers.items(), identity=True),
                lease=self.leases.lease(),
            )
            if producer is not None:
                self._run(producer, credential)
                log_event("stream.reattach", stream_id=record.meta.stream_id,
                          seq=record.state.last_seq, provider_id=record.state.provider_id)
        finally:
            if producer is None:
                self.slots.give_back(credential)
        return None

    def _refuse(self, refusal: Refusal, dialect: str | None) -> Response:
        self.metrics.refusals[refusal.status] += 1
        log_event("request.refused", level=logging.WARNING, status=refusal.status,
                  reason=refusal.message)
        return JSONResponse(error_body(dialect, refusal.status, refusal.message),
                            status_code=refusal.status, headers=refusal.headers)

    async def _pass_through(self, request: Request, endpoint: Endpoint,
                            body: bytes | AsyncIterator[bytes] | None) -> Response:
        url = self.config.origin(endpoint.provider) + target(request)
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
            return upstream_unreachable(endpoint, exc)
        return relay(response)

    # -- access -------------------------------------------------------------------------------

    async def _readable(self, request: Request, *, with_text: bool) -> StreamRecord | None:
        record = await self._settled(request.path_params["stream_id"], with_text=with_text)
        if record is None or not may_read(record.meta, request.headers, request.query_params):
            return None
        return None if self._expired(record) else record

    async def _settled(self, stream_id: str, *, with_text: bool,
                       wait: bool = False) -> StreamRecord | None:
        """The stream, after marking it interrupted if its producer is gone (lease expired);
        ``wait`` (readers of its frames) waits for a lease still running out."""
        record = await self.journal.get(stream_id, with_text=with_text)
        if record is None or record.state.ended or self.journal.tail(stream_id) is not None:
            return record
        if await self.recovery.settle(stream_id, wait=wait) is None:
            return None
        return await self.journal.get(stream_id, with_text=with_text)

    def _expired(self, record: StreamRecord) -> bool:
        if self.journal.tail(record.meta.stream_id) is not None:
            return False
        return record.state.updated < time.time() - self.config.retention


def _unjournaled_end(record: StreamRecord, downstream: Downstream) -> bytes | None:
    """For a reader of a background stream that waits for its owner to re-attach it: the
    dialect's error frame, without an id and not journaled (the stream may yet go on)."""
    if not reattachable(record):
        return None
    frame = error_frame(record.meta.dialect, record.state.last_seq + 1, "proxy_restarted",
                        "unbroken proxy: the stream stopped with the proxy that produced it; "
                        "its owner's next resume continues it")
    return replace(downstream, ids=False, retry_ms=None).frames(record.meta.stream_id, [frame],
                                                                first=False)


def _background(body: bytes) -> bool:
    try:
        payload = json.loads(body)
    except ValueError:
        return False
    return isinstance(payload, dict) and payload.get("background") is True


def create_app(config: ProxyConfig | None = None, *, journal: Journal | None = None) -> Starlette:
    """The proxy as an ASGI app; ``journal`` overrides the one ``config.store`` names."""
    proxy = ProxyApp(config or ProxyConfig(), journal)
    routes = [
        Route("/healthz", proxy.healthz, methods=["GET"]),
        Route("/metrics", proxy.metrics_text, methods=["GET"]),
        Route("/v1/streams/{stream_id}", proxy.stream_status, methods=["GET"]),
        Route("/v1/streams/{stream_id}/cancel", proxy.cancel, methods=["POST"]),
        Route("/v1/streams/{stream_id}/events", proxy.events, methods=["GET"]),
        Route("/{path:path}", proxy.forward,
              methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]),
    ]
    app = Starlette(routes=routes, lifespan=proxy.lifespan)
    app.state.proxy = proxy
    return app
