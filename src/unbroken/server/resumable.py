"""``ResumableStreams``: an app's own streams, produced once, read and resumed any number of times.

``start`` journals a new stream (write-ahead: its record exists before the source is read)
and hands the source to a ``SourceProducer`` task owned by this object; ``response`` serves
the frames after a client's ``Last-Event-ID`` (``responses.py``); ``cancel`` stops the
producer wherever it runs (another replica on Redis too); ``get`` says how the stream stands.

Exactly one producer per stream: a ``start`` with an ``idempotency_key`` (scoped to its owner)
or a ``stream_id`` that names a stream already made attaches to it instead, also when two
starts race (``PendingKeys`` in this process, the journal's claim across replicas). Readers
never start anything. Access is by owner (kept only as a hash) or by the stream's token;
anyone else is told the stream does not exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response

from ..errors import StreamNotFoundError, StreamRefusedError
from ..finish import Status
from ..streams.access import new_stream_id, new_stream_token, secret_hash
from ..streams.app_stream import APP_DIALECT, end_frame, recovered_end
from ..streams.idempotency import PendingKeys, key_hash
from ..streams.journal import Journal, StreamMeta, StreamRecord, StreamState, journal_for
from ..streams.journal.failures import JOURNAL_ERRORS
from ..streams.lease import LeaseKeeper, Recovery, running_elsewhere
from ..streams.limits import StreamSlots
from ..streams.logs import log_event
from .access import may_read, owner_hash, same_owner, summary
from .producer import SourceLimits, SourceProducer
from .responses import OwnerOf, ResponseSettings, stream_response

__all__ = ["ResumableStreams", "StreamHandle"]

log = logging.getLogger("unbroken.server")

_STREAM_ID: Final = re.compile(r"[A-Za-z0-9._~-]{1,128}")
_CLAIM_POLL_S: Final = 0.05  # how often a start waits on a key another replica is creating


@dataclass(frozen=True, slots=True)
class StreamHandle:
    """A started stream. ``token`` grants reading and cancelling it to whoever holds it (a
    browser's ``EventSource`` as ``?token=``); it exists once, so a ``start`` that attached to
    a stream made earlier (``created`` false) has none: the owner reads it by owner."""

    stream_id: str
    token: str | None
    created: bool


class ResumableStreams:
    """Resumable streams for an app's own endpoints, on one journal (``store`` URL, as the
    proxy's: ``memory://``, ``sqlite:///path.db``, ``redis://host:6379/0``)."""

    def __init__(
        self,
        store: str | Journal,
        *,
        keepalive: float = 15.0,
        retry_ms: int = 1000,
        retention: float = 24 * 3600.0,
        expire_every: float = 60.0,
        lease_ttl: float = 15.0,
        lease_renew: float = 5.0,
        max_streams: int | None = 1000,
        max_streams_per_owner: int | None = 16,
        max_frames: int = 100_000,
        max_frame_bytes: int = 1 << 20,
        idle_timeout: float | None = 300.0,
        total_timeout: float | None = None,
        tail_frames: int = 256,
        owner_of: OwnerOf | None = None,
    ) -> None:
        self.journal = journal_for(store, tail_frames=tail_frames) if isinstance(store, str) \
            else store
        self.lease_ttl = lease_ttl
        self.retention = retention
        self.expire_every = expire_every
        self.settings = ResponseSettings(keepalive=keepalive, retry_ms=retry_ms,
                                         retention=retention, owner_of=owner_of)
        self.limits = SourceLimits(max_frames=max_frames, max_frame_bytes=max_frame_bytes,
                                   idle_timeout=idle_timeout, total_timeout=total_timeout)
        self.leases = LeaseKeeper(self.journal, ttl=lease_ttl, renew_every=lease_renew,
                                  kind="app")
        self.recovery = Recovery(self.journal, self.leases, recovered_end)
        self.producers: dict[str, SourceProducer] = {}
        self._slots = StreamSlots(max_streams=max_streams,
                                  max_streams_per_key=max_streams_per_owner)
        self._pending = PendingKeys()
        self._tasks: list[asyncio.Task[None]] = []
        self._open = False
        self._app: Any = None

    # -- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the journal, settle streams left by a dead process, start the background
        work (lease renewal, expiry, and on a shared journal the sweep of dead replicas)."""
        if self._open:
            return
        await self.journal.open()
        self.journal.on_orphan = self.recovery.settle
        self.journal.on_cancel = self._cancel_here
        await self.recovery.startup()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self.leases.run()),
                       loop.create_task(self._expire_forever())]
        if self.journal.follows_other_processes:
            self._tasks.append(loop.create_task(self._sweep_forever()))
        self._open = True

    async def close(self) -> None:
        """Stop every live producer (its stream ends ``interrupted``), then the journal."""
        if not self._open:
            return
        self._open = False
        producers = list(self.producers.values())
        for producer in producers:
            producer.stop("shutdown")
        running = [p.task for p in producers if p.task is not None]
        if running:
            await asyncio.wait(running)
        for task in self._tasks:
            task.cancel()
        self.recovery.close()
        await self.journal.close()

    async def __aenter__(self) -> ResumableStreams:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @contextlib.asynccontextmanager
    async def lifespan(self, app: object) -> AsyncIterator[None]:
        """``FastAPI(lifespan=streams.lifespan)`` / ``Starlette(lifespan=...)``."""
        async with self:
            yield

    async def _expire_forever(self) -> None:
        while True:
            await asyncio.sleep(self.expire_every)
            try:
                await self.journal.expire(time.time() - self.retention)
            except Exception:
                log.exception("journal expiry failed")

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.lease_ttl)
            try:
                await self.recovery.sweep()
            except Exception:
                log.exception("recovery sweep failed")

    # -- starting -----------------------------------------------------------------------------

    async def start(self, source: object, *, owner: str, stream_id: str | None = None,
                    idempotency_key: str | None = None) -> StreamHandle:
        """Journal a new stream and start reading ``source`` in a task of this object; returns
        at once. With an ``idempotency_key`` (per owner) or a ``stream_id`` that a stream
        already has, attaches to that stream instead (``created`` false; ``source`` is closed
        unread). ``StreamRefusedError``: over a limit, not open, the journal down, or a
        ``stream_id`` another owner has (409); ``TypeError`` for a source that is not async
        iterable, ``ValueError`` for a malformed ``stream_id``."""
        if not self._open:
            raise StreamRefusedError("unbroken.server: the streams are not open (use "
                                     "lifespan= or async with)", status=503)
        if not hasattr(source, "__aiter__") and not hasattr(source, "__aenter__"):
            raise TypeError(f"unbroken.server: a source is an async iterable (or an async "
                            f"context manager giving one), not {type(source).__qualname__}")
        if stream_id is not None and not _STREAM_ID.fullmatch(stream_id):
            raise ValueError(f"stream_id must match {_STREAM_ID.pattern}, not {stream_id!r}")
        who = owner_hash(owner)
        key = None if idempotency_key is None else key_hash(who, idempotency_key)
        claim = key if key is not None else None if stream_id is None else "id:" + stream_id
        try:
            if claim is None:
                return await self._create(source, who, new_stream_id(), None)
            return await self._start_once(source, who, stream_id, key, claim)
        except JOURNAL_ERRORS as exc:
            await _close_unread(source)
            raise StreamRefusedError(f"unbroken.server: the journal is unavailable "
                                     f"({type(exc).__name__})", status=503) from exc

    async def _start_once(self, source: object, who: str, stream_id: str | None,
                          key: str | None, claim: str) -> StreamHandle:
        while (waiting := self._pending.claim(claim)) is not None:
            await asyncio.shield(waiting)  # the first start with this key is creating it
        created: str | None = None
        claimed = False
        try:
            found = await self._existing(stream_id, key)
            if found is None:
                claimed = True
                found = await self._claim(claim, stream_id, key)
            if found is None:
                handle = await self._create(source, who, stream_id or new_stream_id(), key)
                created = handle.stream_id
                return handle
            if not same_owner(found.meta.credential_hash, who):
                raise StreamRefusedError(f"unbroken.server: stream id {stream_id!r} is taken",
                                         status=409)
            created = found.meta.stream_id
            await _close_unread(source)
            log_event("stream.attach", stream_id=created, reason="idempotency_key"
                      if key is not None else "stream_id")
            return StreamHandle(created, None, False)
        finally:
            self._pending.settle(claim, created)
            if claimed and created is None:
                await self.journal.release_idempotent(claim, self._claimer)

    @property
    def _claimer(self) -> str:
        return "claim:" + self.leases.owner

    async def _existing(self, stream_id: str | None, key: str | None) -> StreamRecord | None:
        if key is not None:
            found = await self.journal.find_idempotent(key)
        else:
            assert stream_id is not None
            found = await self.journal.get(stream_id, with_text=False)
        return None if found is None or self.expired(found) else found

    async def _claim(self, claim: str, stream_id: str | None,
                     key: str | None) -> StreamRecord | None:
        """Claim the key for this process (``None``), or the stream another replica made with
        it meanwhile. A claim lasts a lease period, so a replica that died mid-start holds the
        others up that long at most."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2 * self.lease_ttl
        while not await self.journal.claim_idempotent(claim, self._claimer, self.lease_ttl):
            found = await self._existing(stream_id, key)
            if found is not None:
                return found
            if loop.time() > deadline:
                raise StreamRefusedError("unbroken.server: another start with this key is "
                                         "under way; retry", status=409)
            await asyncio.sleep(_CLAIM_POLL_S)  # rare: two replicas got one key at once
        return None

    async def _create(self, source: object, who: str, stream_id: str,
                      key: str | None) -> StreamHandle:
        refusal = self._slots.take(who)
        if refusal is not None:
            await _close_unread(source)
            what = "this owner has" if refusal.status == 429 else "this process has"
            raise StreamRefusedError(f"unbroken.server: {what} too many live streams",
                                     status=refusal.status)
        token = new_stream_token()
        now = time.time()
        meta = StreamMeta(stream_id=stream_id, dialect=APP_DIALECT, created=now,
                          media_type="text/event-stream", token_hash=secret_hash(token),
                          credential_hash=who, idempotency_hash=key)
        try:
            # Its live tail stays with the journal until the producer's last append.
            await self.journal.create(meta, StreamState(status=Status.PENDING, updated=now),
                                      self.leases.lease())
        except BaseException:
            self._slots.give_back(who)
            raise
        producer = SourceProducer(journal=self.journal, stream_id=stream_id, source=source,
                                  limits=self.limits)
        self.producers[stream_id] = producer

        def ended(_task: asyncio.Task[None]) -> None:
            self.producers.pop(stream_id, None)
            self._slots.give_back(who)

        producer.start().add_done_callback(ended)
        log_event("stream.start", stream_id=stream_id, dialect=APP_DIALECT)
        return StreamHandle(stream_id, token, True)

    # -- reading and stopping -----------------------------------------------------------------

    def resumed(self, stream_id: str, after: int) -> None:
        """A reader resumed after seq ``after``: an event on the span of the provider stream
        this process reads into it (telemetry; never a second operation)."""
        producer = self.producers.get(stream_id)
        if producer is not None and producer.observation is not None:
            producer.observation.event("unbroken.resume", side="downstream", after_seq=after)

    def response(self, stream_id: str, request: Request, *, owner: str | None) -> Response:
        """The stream as SSE for ``request`` (its ``Last-Event-ID`` or ``?after=N``, and
        ``?token=`` / ``Unbroken-Stream-Token`` when ``owner`` is not the stream's): see
        ``responses.py`` for every status it answers with."""
        return stream_response(self, stream_id, request,
                               None if owner is None else owner_hash(owner))

    async def get(self, stream_id: str, *, owner: str | None = None,
                  token: str | None = None) -> dict[str, Any]:
        """How the stream stands: status, finish reason, raw reason, error, text, last seq.
        ``StreamNotFoundError`` for a stream unknown, expired, or not this owner's/token's."""
        record = await self.readable(stream_id, None if owner is None else owner_hash(owner),
                                     token, with_text=True)
        return summary(record)

    async def cancel(self, stream_id: str, *, owner: str | None = None,
                     token: str | None = None) -> dict[str, Any]:
        """Stop the stream's producer, in this process or another replica's; it ends
        ``cancelled`` (a stream ended already keeps its end). The stream as ``get`` says."""
        record = await self.readable(stream_id, None if owner is None else owner_hash(owner),
                                     token, with_text=False)
        producer = self.producers.get(stream_id)
        if producer is not None and producer.task is not None:
            producer.stop("cancelled")
            await asyncio.wait([producer.task])
        elif not record.state.ended and not await self._cancel_elsewhere(record):
            latest = await self.settled(record, wait=False)
            if not latest.state.ended:  # no producer anywhere: its end is written here
                last = latest.state.last_seq + 1
                state = StreamState(status=Status.CANCELLED, updated=time.time(), last_seq=last)
                with contextlib.suppress(ValueError):  # a replica ended it meanwhile
                    await self.journal.append(stream_id, [end_frame(last, Status.CANCELLED)],
                                              state)
        after = await self.journal.get(stream_id, with_text=True)
        if after is None:
            raise StreamNotFoundError(f"no stream {stream_id}")
        return summary(after)

    def _cancel_here(self, stream_id: str) -> None:
        """A cancel request from any replica: stop the stream if it is produced here."""
        producer = self.producers.get(stream_id)
        if producer is not None:
            producer.stop("cancelled")

    async def _cancel_elsewhere(self, record: StreamRecord) -> bool:
        """Ask the replica producing the stream to cancel it; wait (a lease period at most)
        for the end it writes. ``False`` if no other live replica produces it."""
        stream_id = record.meta.stream_id
        lease = await self.journal.lease(stream_id)
        if not running_elsewhere(lease, self.leases.owner):
            return False
        if not await self.journal.request_cancel(stream_id):
            return False
        follow = self.journal.follow(stream_id, record.state.last_seq)
        try:
            async with asyncio.timeout(self.lease_ttl):
                async for _batch in follow:
                    pass
        except TimeoutError:
            log.warning("stream %s: its producer did not answer a cancel", stream_id)
        finally:
            await follow.aclose()
        return True

    # -- access -------------------------------------------------------------------------------

    async def readable(self, stream_id: str, who: str | None, token: str | None, *,
                       with_text: bool) -> StreamRecord:
        """The stream if ``who`` (an owner hash) or ``token`` may read it, settled if its
        producer is gone; else ``StreamNotFoundError``."""
        record = await self.journal.get(stream_id, with_text=with_text)
        if record is None or not may_read(record.meta.token_hash, record.meta.credential_hash,
                                          who, token) or self.expired(record):
            raise StreamNotFoundError(f"no stream {stream_id} (unknown, expired, or not yours)")
        settled = await self.settled(record, wait=False)
        if settled is not record and with_text:
            settled = await self.journal.get(stream_id, with_text=True) or settled
        return settled

    async def settled(self, record: StreamRecord, *, wait: bool) -> StreamRecord:
        """The stream after marking it ``interrupted`` if its producer is gone; ``wait``
        (readers of its frames) waits for a lease still running out."""
        stream_id = record.meta.stream_id
        if record.state.ended or self.journal.tail(stream_id) is not None:
            return record
        wait = wait and not self.journal.follows_other_processes
        return await self.recovery.settle(stream_id, wait=wait) or record

    def expired(self, record: StreamRecord) -> bool:
        if self.journal.tail(record.meta.stream_id) is not None:
            return False
        return record.state.ended and record.state.updated < time.time() - self.retention

    @property
    def app(self) -> Any:
        """A Starlette app to mount (``app.mount("/streams", streams.app)``): ``GET /``,
        ``GET /{id}``, ``GET /{id}/events``, ``POST /{id}/cancel`` (``routes.py``)."""
        if self._app is None:
            from .routes import mountable_app

            self._app = mountable_app(self)
        return self._app


async def _close_unread(source: object) -> None:
    """A source that will not be read (its start attached or was refused): let it release
    what it holds (an SDK stream's connection)."""
    aclose = getattr(source, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5.0):
                await aclose()
