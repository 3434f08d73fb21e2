"""``create_app(ProxyConfig(...))``: the proxy as a Starlette ASGI app.

Routes
------
=========================================  ==================================================
``GET  /healthz``                          200 once the journal is open and the client ready
                                           (503 before, and while draining on shutdown)
``GET  /metrics``                          Prometheus text: streams, frames, resumes, errors
``GET  /v1/streams``                       the caller's own streams, newest first (listing.py)
``GET  /v1/streams/{id}``                  status, finish reason, text, last seq, usage, error
``POST /v1/streams/{id}/cancel``           stop the generation (status ``cancelled``)
``GET  /v1/streams/{id}/events``           SSE with ids for any dialect; ``Last-Event-ID`` or
                                           ``?after=``; ``?token=`` for ``EventSource``;
                                           ``?format=unbroken``: normalized events
                                           (normalized_body.py)
``GET  /unbroken.js``                      the browser module (``unbroken.web``)
``GET  /v1/streams/{id}/capture``          the stream as a capture file, each frame at its
                                           receive time, for ``unbroken inspect`` (evidence.py)
anything else                              forwarded to its provider's origin; the streaming
                                           endpoints are journaled and resumable
=========================================  ==================================================

New streams are started by ``launcher.py`` (limits, ``Idempotency-Key``, leases, re-attach,
drain). Producers hold leases and dead ones' streams are recovered, Responses background ones
re-attached upstream by their owner (``lease.py``, ``reattach.py``); limits refuse with their
status (``limits.py``); SIGTERM drains (``shutdown.py``); counters in ``metrics.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import httpx2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .. import telemetry
from ..dialects import DIALECT_NAMES
from ..finish import Status
from ..normalized_sse import asks_for_normalized
from ..resumption import LAST_EVENT_ID, PROXY_MESSAGE_PREFIX, event_id_prefix
from ..streams.access import events_cursor, may_read, parse_event_id
from ..streams.journal import Journal, StreamRecord, journal_for
from ..streams.lease import LeaseKeeper, Recovery, running_elsewhere
from ..streams.limits import Refusal, body_refusal, read_body
from ..streams.logs import install_redaction, log_event
from ..web import SCRIPT_PATH, script_response
from .config import ProxyConfig
from .cors import SERVED_METHODS, CORSStarlette, cors_options
from .evidence import capture
from .journal_failures import JOURNAL_ERRORS, journal_failed
from .launcher import Launcher, expired
from .listing import list_own_streams
from .metrics import CONTENT_TYPE, ProxyMetrics
from .normalized_body import normalized_response
from .producer_lost import reattachable, recovered_end
from .relay import not_found, relay, target, upstream_unreachable
from .replay import stream_response
from .routing import Endpoint, endpoint_for, request_headers, wants_stream
from .wire import downstream_for, error_body

__all__ = ["ProxyApp", "create_app"]

log = logging.getLogger("unbroken.proxy")


class ProxyApp:
    """The proxy's state (journal, upstream client, live producers) and its request handlers."""

    def __init__(self, config: ProxyConfig, journal: Journal | None = None) -> None:
        self.config = config
        self.journal = journal or journal_for(config.store, tail_frames=config.tail_frames)
        self.ready = False
        self._client: httpx2.AsyncClient | None = None
        self.metrics = ProxyMetrics()
        self.journal.observer = self.metrics
        self.leases = LeaseKeeper(self.journal, ttl=config.lease_ttl,
                                  renew_every=config.lease_renew)
        self.recovery = Recovery(self.journal, self.leases, recovered_end)
        self.launcher = Launcher(journal=self.journal, config=config, metrics=self.metrics,
                                 leases=self.leases, recovery=self.recovery)
        # The live producers of this process, by stream id (the launcher's own dict).
        self.producers = self.launcher.producers
        # A journal shared with other replicas brings their readers' orphans and cancels here.
        self.journal.on_orphan = self.recovery.settle
        self.journal.on_cancel = self._cancel_here

    @property
    def draining(self) -> bool:
        return self.launcher.draining

    def begin_drain_threadsafe(self) -> None:
        """Start the drain from a signal handler (see ``Launcher.begin_drain``)."""
        self.launcher.begin_drain_threadsafe()

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
        self.launcher.running(self._client)
        expiry = asyncio.get_running_loop().create_task(self._expire_forever())
        renewal = asyncio.get_running_loop().create_task(self.leases.run())
        sweep = asyncio.get_running_loop().create_task(self._sweep_forever())
        self.ready = True
        log_event("proxy.ready", owner=self.leases.owner, store=config.store.partition(":")[0])
        try:
            yield
        finally:
            self.ready = False
            await self.launcher.begin_drain()
            expiry.cancel()
            renewal.cancel()
            sweep.cancel()
            self.recovery.close()
            await self._client.aclose()
            self._client = None
            await self.journal.close()

    async def _sweep_forever(self) -> None:
        """Settle the streams of a producer that died while no reader watched them (readers
        settle theirs at once): a replica sharing the journal, a sibling worker on the same
        SQLite file, or a producer of this process that lost its journal; one renewal period
        apart, so a dead replica's streams end at most that long after its lease ran out."""
        while True:
            await asyncio.sleep(self.config.lease_renew)
            try:
                await self.recovery.sweep()
            except Exception as error:  # the journal is away: the next round looks again
                log_event("recovery.sweep_failed", level=logging.WARNING,
                          error=type(error).__name__, detail=str(error))

    async def _expire_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.expire_every)
            try:
                gone = await self.journal.expire(time.time() - self.config.retention)
            except Exception as error:  # the journal is away: one line, the next round tries
                log_event("journal.expiry_failed", level=logging.WARNING,
                          error=type(error).__name__, detail=str(error))
                continue
            if gone:
                log.info("expired %d stream(s)", gone)

    # -- proxy endpoints ----------------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        if not self.ready or self.draining:
            status = "draining" if self.draining else "starting"
            return JSONResponse({"status": status}, status_code=503)
        problem = await self.journal.problem()
        if problem is not None:  # a shared journal that went away: route to another replica
            return JSONResponse({"status": "journal unavailable", "error": problem},
                                status_code=503)
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
        elif not record.state.ended and await self._cancel_elsewhere(stream_id, record):
            pass  # its producer, in another replica, wrote the cancelled end
        elif not record.state.ended or reattachable(record):
            await self.journal.set_status(
                stream_id, replace(record.state, status=Status.CANCELLED, updated=time.time())
            )
        after = await self.journal.get(stream_id, with_text=True)
        assert after is not None
        return JSONResponse(after.summary())

    def _cancel_here(self, stream_id: str) -> None:
        """A cancel request from any replica: stop the stream if it is produced here."""
        producer = self.producers.get(stream_id)
        if producer is not None:
            producer.stop("cancelled")

    async def _cancel_elsewhere(self, stream_id: str, record: StreamRecord) -> bool:
        """Cancel a stream another replica produces: ask it, and wait (one lease period at
        most) for the end it writes. ``False`` if no other live replica produces it."""
        lease = await self.journal.lease(stream_id)
        if not running_elsewhere(lease, self.leases.owner):
            return False
        if not await self.journal.request_cancel(stream_id):
            return False
        follow = self.journal.follow(stream_id, record.state.last_seq)
        try:
            async with asyncio.timeout(self.config.lease_ttl):
                async for _batch in follow:
                    pass
        except TimeoutError:
            log.warning("stream %s: its producer did not answer a cancel", stream_id)
        finally:
            await follow.aclose()
        return (await self.journal.get(stream_id, with_text=False) or record).state.ended

    async def events(self, request: Request) -> Response:
        stream_id = request.path_params["stream_id"]
        eventsource = "text/event-stream" in request.headers.get("accept", "")
        try:
            normalized = asks_for_normalized(request.query_params.get("format"),
                                             request.headers.get("accept", ""))
        except ValueError as exc:
            return JSONResponse({"error": {"message": str(exc), "type": "invalid_request_error"}},
                                status_code=400)
        record = await self.journal.get(stream_id, with_text=False)
        if record is None:
            # Purged after its retention: its owner's EventSource is told to stop (204).
            tomb = await self.journal.tombstone(stream_id)
            if eventsource and tomb is not None and may_read(
                tomb, request.headers, request.query_params
            ):
                return Response(status_code=204)
            return not_found()
        if not may_read(record.meta, request.headers, request.query_params):
            return not_found()
        record = await self._settled(stream_id, with_text=False, known=record) or record
        if self._expired(record):
            return Response(status_code=204) if eventsource else not_found()
        after = events_cursor(stream_id, request.headers, request.query_params)
        if after is None:
            return JSONResponse(
                {"error": {"message": "Last-Event-ID or ?after= does not name a seq of this "
                                      "stream", "type": "invalid_request_error"}},
                status_code=400,
            )
        refused = await self.launcher.reattach(record, request)
        if refused is not None:
            return self.launcher.refuse(refused, None)
        if reattachable(record):  # the re-attach (if it went ahead) changed its state
            record = await self.journal.get(stream_id, with_text=False) or record
        if after:
            self._resumed(stream_id, after)
        if normalized and record.meta.dialect not in DIALECT_NAMES:
            return JSONResponse({"error": {
                "message": f"format=unbroken reads provider streams; stream {stream_id} is "
                           f"{record.meta.dialect!r}, whose frames are already its own",
                "type": "invalid_request_error"}}, status_code=400)
        if normalized:  # even after the last frame: the reader gets the end alone
            return normalized_response(self.journal, stream_id, record.meta.dialect, after,
                                       keepalive=self.config.keepalive)
        downstream = downstream_for(record.meta.dialect, record.meta.media_type,
                                    events_endpoint=True, retry_ms=self.config.retry_ms)
        if record.state.ended and after >= record.state.last_seq and not reattachable(record):
            return Response(status_code=204)  # nothing more will come: an EventSource stops
        return stream_response(self.journal, stream_id, after, downstream,
                               keepalive=self.config.keepalive,
                               settle=await self.recovery.waiter(record))

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
            return self.launcher.refuse(body, endpoint.dialect)
        if not wants_stream(endpoint, body, request.query_params):
            return await self._pass_through(request, endpoint, body)
        last_event_id = request.headers.get(LAST_EVENT_ID, "").strip()
        resume = parse_event_id(last_event_id)
        if resume is not None:
            return await self._resume(request, endpoint, *resume)
        if last_event_id:
            # Not an id of ours: a resume that cannot be served, never a second generation.
            return JSONResponse(error_body(
                endpoint.dialect, 400,
                f"{PROXY_MESSAGE_PREFIX}{LAST_EVENT_ID} {last_event_id[:80]!r} is not an event "
                f"id of this proxy ({event_id_prefix('<stream_id>')}<seq>)"), status_code=400)
        return await self.launcher.start(request, endpoint, body)

    def _resumed(self, stream_id: str, after: int) -> None:
        """A reader resumed after seq ``after``: counted, and an event on the stream's span
        while this process produces it (telemetry; a resume is never a second operation)."""
        self.metrics.resumes += 1
        producer = self.producers.get(stream_id)
        if producer is not None and producer.observation is not None:
            producer.observation.event("unbroken.resume", side="downstream", after_seq=after)

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
        record = await self._settled(stream_id, with_text=False, known=record) or record
        refused = await self.launcher.reattach(record, request)
        if refused is not None:
            return self.launcher.refuse(refused, endpoint.dialect)
        if reattachable(record):  # the re-attach (if it went ahead) changed its state
            record = await self.journal.get(stream_id, with_text=False) or record
        self._resumed(stream_id, after)
        downstream = downstream_for(record.meta.dialect, record.meta.media_type,
                                    events_endpoint=False, retry_ms=self.config.retry_ms,
                                    accept=request.headers.get("accept", ""))
        return stream_response(
            self.journal, stream_id, after, downstream, keepalive=self.config.keepalive,
            headers=list(record.meta.response_headers), settle=await self.recovery.waiter(record),
        )

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

    async def _settled(self, stream_id: str, *, with_text: bool, wait: bool = False,
                       known: StreamRecord | None = None) -> StreamRecord | None:
        """The stream, after marking it interrupted if its producer is gone (lease expired);
        ``wait`` (readers of its frames) waits for a lease still running out. ``known``: the
        record just read, to spare a read of a stream that needs nothing."""
        record = known or await self.journal.get(stream_id, with_text=with_text)
        if record is None or record.state.ended or self.journal.tail(stream_id) is not None:
            return record
        # A journal that follows other replicas' streams needs no wait: its readers see the
        # producer's lease run out while they follow (``Journal.on_orphan``).
        wait = wait and not self.journal.follows_other_processes
        if await self.recovery.settle(stream_id, wait=wait) is None:
            return None
        return await self.journal.get(stream_id, with_text=with_text)

    def _expired(self, record: StreamRecord) -> bool:
        return expired(self.journal, record, self.config.retention)


def create_app(config: ProxyConfig | None = None, *, journal: Journal | None = None) -> Starlette:
    """The proxy as an ASGI app; ``journal`` overrides the one ``config.store`` names.

    With ``config.cors_origins``, Starlette's ``CORSMiddleware`` answers preflights (they never
    reach a route, so nothing goes upstream) and adds CORS headers to every response for those
    origins, the 204 that stops an ``EventSource`` and the 404s included.
    """
    proxy = ProxyApp(config or ProxyConfig(), journal)
    config = proxy.config
    if config.otel and not telemetry.instrumented():  # the embedding app's own options win
        telemetry.instrument(chunk_intervals=config.otel_chunk_intervals)
    routes = [
        Route("/healthz", proxy.healthz, methods=["GET"]),
        Route("/metrics", proxy.metrics_text, methods=["GET"]),
        Route("/v1/streams", list_own_streams, methods=["GET"]),
        Route("/v1/streams/{stream_id}", proxy.stream_status, methods=["GET"]),
        Route("/v1/streams/{stream_id}/cancel", proxy.cancel, methods=["POST"]),
        Route("/v1/streams/{stream_id}/events", proxy.events, methods=["GET"]),
        Route("/v1/streams/{stream_id}/capture", capture, methods=["GET"]),
        Route(SCRIPT_PATH, script_response, methods=["GET"]),
        Route("/{path:path}", proxy.forward, methods=SERVED_METHODS),
    ]
    app = CORSStarlette(routes=routes, lifespan=proxy.lifespan,
                        cors=cors_options(config.cors_origins),
                        exception_handlers={error: journal_failed for error in JOURNAL_ERRORS})
    app.state.proxy = proxy
    return app
