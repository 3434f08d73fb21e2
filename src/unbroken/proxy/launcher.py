"""``Launcher``: how this process starts, continues and stops the producers of streams.

It holds the live producers and everything that decides whether one may start: the draining
flag (SIGTERM), the stream slots (429 per credential, 503 in all), the Idempotency-Key of a
create (attach to the stream the key made, or 422), and the lease each producer takes. It starts
a new stream (a journaled stream, write-ahead, then one upstream request and its producer),
re-attaches a Responses background stream for its owner, and drains on shutdown.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import replace

import httpx2
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..dialects import get_dialect
from ..finish import Status
from ..resumption import STREAM_TOKEN_HEADER
from ..streams.access import credential_hash, new_stream_id, new_stream_token, secret_hash
from ..streams.idempotency import PendingKeys, idempotency_hash, request_hash
from ..streams.journal import Journal, StreamMeta, StreamRecord, StreamState
from ..streams.lease import LeaseKeeper, Recovery
from ..streams.limits import DRAINING, Refusal, StreamSlots
from ..streams.logs import log_event
from .config import ProxyConfig
from .metrics import ProxyMetrics
from .producer_lost import reattachable
from .reattach import continue_upstream
from .relay import relay, target, upstream_unreachable
from .replay import stream_response
from .routing import Endpoint, request_headers, response_headers
from .upstream import Producer, UpstreamRequest
from .wire import downstream_for, error_body

__all__ = ["Launcher", "expired"]

_CLAIM_POLL_S = 0.05  # how often a request waits on a key another replica is creating
_CLAIM_MARGIN_S = 1.0  # past a claim's lifetime: it expired or was taken by then
_REATTACH_CLAIM = "reattach:"  # + stream id: the journal's claim on continuing it upstream


def expired(journal: Journal, record: StreamRecord, retention: float) -> bool:
    """An ended stream past its retention (a stream live in this process never is)."""
    if journal.tail(record.meta.stream_id) is not None:
        return False
    return record.state.updated < time.time() - retention


class Launcher:
    """The live producers of this process, and the rules for starting one."""

    def __init__(self, *, journal: Journal, config: ProxyConfig, metrics: ProxyMetrics,
                 leases: LeaseKeeper, recovery: Recovery) -> None:
        self.journal = journal
        self.config = config
        self.metrics = metrics
        self.leases = leases
        self.recovery = recovery
        self.producers: dict[str, Producer] = {}
        self.slots = StreamSlots(max_streams=config.max_streams,
                                 max_streams_per_key=config.max_streams_per_key)
        self.pending_keys = PendingKeys()
        self.draining = False
        self.client: httpx2.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain: asyncio.Task[None] | None = None

    def running(self, client: httpx2.AsyncClient) -> None:
        """The lifespan started: the upstream client, and a fresh drain state."""
        self.client = client
        self._loop = asyncio.get_running_loop()
        self._drain = None
        self.draining = False

    def _client(self) -> httpx2.AsyncClient:
        if self.client is None:
            raise RuntimeError("the proxy is not running (lifespan not started)")
        return self.client

    # -- shutdown -----------------------------------------------------------------------------

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

    # -- starting -----------------------------------------------------------------------------

    async def start(self, request: Request, endpoint: Endpoint, body: bytes) -> Response:
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
            if found is None or expired(self.journal, found, self.config.retention):
                claimed = await self._claim_key(key, None if found is None
                                                else found.meta.stream_id)
                if isinstance(claimed, Refusal):
                    return self.refuse(claimed, endpoint.dialect)
                found = claimed
            if found is not None:
                created = found.meta.stream_id
                return await self._attach(found, asked, endpoint, request)
            keeper = asyncio.get_running_loop().create_task(self._keep_claim(key))
            try:
                response, created = await self._create(request, endpoint, body, credential,
                                                       idempotency=(key, asked))
            finally:
                keeper.cancel()
                if created is None:
                    await self.journal.release_idempotent(key, self._claimer)
            return response
        finally:
            self.pending_keys.settle(key, created)

    @property
    def _claimer(self) -> str:
        return "claim:" + self.leases.owner

    async def _claim_key(self, key: str, stale: str | None) -> StreamRecord | Refusal | None:
        """Claim the key for this process's create (``None``), or the stream another replica
        created with it meanwhile. A claim lasts a lease period unless its holder renews it,
        so a replica that dies mid-create holds others up that long at most; a live one is
        waited for as long as its upstream may take to answer, then 409."""
        loop = asyncio.get_running_loop()
        config = self.config
        deadline = (loop.time() + config.connect_timeout + config.read_timeout
                    + config.lease_ttl + _CLAIM_MARGIN_S)
        while not await self.journal.claim_idempotent(key, self._claimer, config.lease_ttl,
                                                      replacing=stale):
            found = await self.journal.find_idempotent(key)
            if found is not None and not expired(self.journal, found, self.config.retention):
                return found
            if loop.time() > deadline:
                return Refusal(status=409, message="unbroken proxy: another request with this "
                                                   "Idempotency-Key is being started; retry")
            await asyncio.sleep(_CLAIM_POLL_S)  # rare: two replicas got one key at once
        return None

    async def _keep_claim(self, key: str) -> None:
        """Renew this process's claim on a key while its create waits for the upstream."""
        while True:
            await asyncio.sleep(self.config.lease_renew)
            try:
                await self.journal.claim_idempotent(key, self._claimer, self.config.lease_ttl)
            except Exception as error:  # the journal is away: one line, the next round tries
                log_event("idempotency.renew_failed", level=logging.WARNING,
                          error=type(error).__name__, detail=str(error))

    async def _attach(self, record: StreamRecord, asked: str, endpoint: Endpoint,
                      request: Request) -> Response:
        if record.meta.request_hash != asked:
            return self.refuse(Refusal(
                status=422, message="unbroken proxy: this Idempotency-Key was used with a "
                                    "different request"), endpoint.dialect)
        self.metrics.idempotent_attaches += 1
        stream_id = record.meta.stream_id
        # Settled at once if its producer is gone; one that may live in another process is
        # waited for inside the response (its head and keep-alives go out meanwhile). A
        # journal that follows other replicas needs neither (its readers see it end).
        record = await self.recovery.settle(stream_id) or record
        settle = await self.recovery.waiter(record)
        log_event("stream.attach", stream_id=stream_id, reason="idempotency_key")
        downstream = downstream_for(record.meta.dialect, record.meta.media_type,
                                    events_endpoint=False, retry_ms=self.config.retry_ms,
                                    accept=request.headers.get("accept", ""))
        return stream_response(
            self.journal, stream_id, 0, downstream, keepalive=self.config.keepalive,
            headers=[*record.meta.response_headers, ("idempotent-replayed", "true")],
            settle=settle,
        )

    async def _create(
        self, request: Request, endpoint: Endpoint, body: bytes, credential: str | None,
        idempotency: tuple[str, str] | None = None,
    ) -> tuple[Response, str | None]:
        assert endpoint.dialect is not None
        refused = DRAINING if self.draining else self.slots.take(credential)
        if refused is not None:
            return self.refuse(refused, endpoint.dialect), None
        origin = self.config.origin(endpoint.provider)
        asking = endpoint.spec.usage_request(body) if self.config.request_usage else None
        upstream = UpstreamRequest(
            url=origin + target(request),
            headers=request_headers(request.headers.items(), identity=True),
            body=body if asking is None else asking,
            origin=origin,
            background=endpoint.spec.resumes_upstream and _background(body),
            usage_asked=asking is not None,
        )
        producer: Producer | None = None
        try:
            client = self._client()
            # Write-ahead: the stream is journaled (pending) before its request leaves, so a
            # crash while the provider thinks (the whole time to first byte) leaves a record
            # that recovery ends, the listing shows and the Idempotency-Key finds, instead of
            # a generation that may be billed and that nothing can find.
            now = time.time()
            token = new_stream_token()
            meta = StreamMeta(
                stream_id=new_stream_id(),
                dialect=endpoint.dialect,
                created=now,
                media_type=get_dialect(endpoint.dialect).media_type,  # until the answer
                token_hash=secret_hash(token),
                credential_hash=credential,
                request_path=request.url.path,
                idempotency_hash=None if idempotency is None else idempotency[0],
                request_hash=None if idempotency is None else idempotency[1],
                background=upstream.background,
            )
            tail = await self.journal.create(
                meta, StreamState(status=Status.PENDING, updated=now), self.leases.lease())
            requested = time.monotonic()  # time to first chunk and to the end count from here
            sent = time.perf_counter()
            try:
                response = await client.send(
                    client.build_request("POST", upstream.url, headers=upstream.headers,
                                         content=upstream.body),
                    stream=True,
                )
            except httpx2.HTTPError as exc:
                self.metrics.upstream_errors["unreachable"] += 1
                await self.journal.discard(meta.stream_id)
                return upstream_unreachable(endpoint, exc), None
            except BaseException:
                await asyncio.shield(self.journal.discard(meta.stream_id))
                raise
            latency = time.perf_counter() - sent
            self.metrics.upstream_seconds.observe(latency)
            content_type = response.headers.get("content-type", "")
            if not 200 <= response.status_code < 300 or not endpoint.streams_as(content_type):
                if response.status_code >= 400:
                    self.metrics.upstream_errors["status"] += 1
                log_event("upstream.answer", level=logging.WARNING, path=request.url.path,
                          status=response.status_code, upstream_ms=round(latency * 1000, 3))
                try:
                    await self.journal.discard(meta.stream_id)
                except BaseException:
                    await response.aclose()
                    raise
                return relay(response), None
            forwarded = response_headers(response.headers.multi_items(), reencoded=True)
            meta = replace(meta, media_type=content_type, response_headers=tuple(
                (name, value) for name, value in forwarded
                if name.lower() not in ("set-cookie", "content-type")
            ))
            try:
                await self.journal.answered(meta)
            except BaseException:
                await response.aclose()
                self.journal.release(meta.stream_id)
                raise
            producer = Producer(journal=self.journal, client=client, config=self.config,
                                meta=meta, tail=tail, request=upstream, response=response,
                                metrics=self.metrics, requested=requested)
            self.run(producer, credential)
        finally:
            if producer is None:
                self.slots.give_back(credential)
        self.metrics.streams_started += 1
        log_event("stream.start", stream_id=meta.stream_id, dialect=endpoint.dialect,
                  path=request.url.path, upstream_status=response.status_code,
                  upstream_ms=round(latency * 1000, 3), background=upstream.background or None)
        downstream = downstream_for(endpoint.dialect, content_type, events_endpoint=False,
                                    retry_ms=self.config.retry_ms,
                                    accept=request.headers.get("accept", ""))
        return stream_response(
            self.journal, meta.stream_id, 0, downstream, keepalive=self.config.keepalive,
            status_code=response.status_code,
            headers=[*forwarded, (STREAM_TOKEN_HEADER.lower(), token)],
        ), meta.stream_id

    def run(self, producer: Producer, credential: str | None) -> None:
        """Start a producer; its slot and its place in ``producers`` go when it ends."""
        stream_id = producer.stream_id
        self.producers[stream_id] = producer

        def ended(_task: asyncio.Task[None]) -> None:
            self.producers.pop(stream_id, None)
            self.slots.give_back(credential)

        producer.start().add_done_callback(ended)

    async def reattach(self, record: StreamRecord, request: Request) -> Refusal | None:
        """Continue a background stream left by a dead producer, if this is its owner."""
        if not reattachable(record) or self.draining:
            return None
        credential = credential_hash(request.headers, request.query_params)
        if credential is None or credential != record.meta.credential_hash:
            return None  # a token holder reads what is stored; only the owner can pay
        refused = self.slots.take(credential)
        if refused is not None:
            return refused
        stream_id = record.meta.stream_id
        producer = None
        claim = _REATTACH_CLAIM + stream_id
        claimed = False
        try:
            # Replicas sharing the journal: the owner's resumes may reach two at once, and both
            # would read the response upstream again. The claim lets one; it is left to expire
            # (a lease period), by when the stream is live or settled again, and read again here.
            claimed = await self.journal.claim_idempotent(claim, self._claimer,
                                                          self.config.lease_ttl)
            if not claimed:
                # Another replica is re-attaching it: the reader follows that one, once it has
                # reopened the stream (a moment: it re-reads the journaled frames first).
                await self._reopened_elsewhere(stream_id)
                return None
            latest = await self.journal.get(stream_id, with_text=False)
            if latest is not None and reattachable(latest):
                producer = await continue_upstream(
                    journal=self.journal, client=self._client(), config=self.config,
                    record=latest, headers=request_headers(request.headers.items(),
                                                           identity=True),
                    lease=self.leases.lease(),
                )
                if producer is not None:
                    self.run(producer, credential)
                    log_event("stream.reattach", stream_id=stream_id,
                              seq=latest.state.last_seq, provider_id=latest.state.provider_id)
        finally:
            if producer is None:
                self.slots.give_back(credential)
                if claimed:
                    await self.journal.release_idempotent(claim, self._claimer)
        return None

    async def _reopened_elsewhere(self, stream_id: str) -> None:
        """Wait (one lease period at most) until the stream is no longer waiting for its
        re-attach: live again, or ended."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.lease_ttl
        while loop.time() < deadline:
            latest = await self.journal.get(stream_id, with_text=False)
            if latest is None or not reattachable(latest):
                return
            await asyncio.sleep(_CLAIM_POLL_S)  # rare: two replicas got one resume at once

    def refuse(self, refusal: Refusal, dialect: str | None) -> Response:
        self.metrics.refusals[refusal.status] += 1
        log_event("request.refused", level=logging.WARNING, status=refusal.status,
                  reason=refusal.message)
        return JSONResponse(error_body(dialect, refusal.status, refusal.message),
                            status_code=refusal.status, headers=refusal.headers)


def _background(body: bytes) -> bool:
    try:
        payload = json.loads(body)
    except ValueError:
        return False
    return isinstance(payload, dict) and payload.get("background") is True
