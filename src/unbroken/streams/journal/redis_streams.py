"""``RedisJournal``: streams in Redis Streams, shared by several proxy processes (replicas).

``--store redis://host:6379/0`` (``rediss://`` for TLS, ``?prefix=`` for the key prefix, default
``unbroken:``). Every proxy pointed at the same Redis serves every stream: a client whose
reconnect lands on another replica than the one reading the upstream gets exactly the frames
after its ``Last-Event-ID``, then the live tail, with no upstream request.

- Writes are group-committed: every append made in one turn of the event loop goes to Redis in
  one call of one Lua script (``redis_scripts.py``); each append lands whole or not at all, and
  one whose first frame is not the next seq is refused without stopping the others.
- A stream produced in this process is followed through its in-process ``LiveTail`` as in the
  other journals. Another process's stream is followed with ``XREAD BLOCK`` on its frames and on
  its ends stream: woken by Redis itself when frames or the end land, never by sleep-polling.
  A reader idle for a while checks the stream's producer lease; an expired one is handed to
  ``on_orphan`` (the proxy's recovery, which marks the stream interrupted with an error frame).
  The loop is ``shared_follow.py`` (one for SQLite and Redis), the Redis watch ``redis_follow.py``.
- ``request_cancel`` publishes on a channel every replica listens to; the one producing the
  stream stops it (``on_cancel``), so the producer itself writes the cancelled end.
- ``list_streams`` walks sorted sets of ids by creation time that ``CREATE`` and ``PURGE``
  keep (``redis_listing.py``); streams created by a proxy older than them are not listed.

Not for Redis Cluster: a lease renewal and a purge touch keys of many streams. Nothing secret is
stored: credentials and tokens only as SHA-256 hashes; a password in the URL stays in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any, Final

from ..logs import log_event
from . import redis_scripts
from .base import (
    FrameRecord,
    Lease,
    StreamMeta,
    StreamRecord,
    StreamState,
    Tombstone,
)
from .listing import StreamQuery
from .redis_follow import ORPHAN_CHECK, RedisFollow
from .redis_listing import listed
from .redis_records import (
    frame_from,
    meta_json,
    packed_appends,
    record_from,
    refusal,
    split_prefix,
    state_json,
)

__all__ = ["ORPHAN_CHECK", "PING_TIMEOUT", "SOCKET_TIMEOUT_MARGIN", "RedisJournal"]

PING_TIMEOUT: Final = 2.0  # seconds ``problem()`` waits for Redis
# Past the longest blocking read (``orphan_check``): a socket timeout under it would cut every
# follower of a stream quiet that long (redis-py 8 sets 5 s unless told). Any other command
# answers in milliseconds, so this also bounds how long one waits on a Redis that hangs.
SOCKET_TIMEOUT_MARGIN: Final = 5.0
MAX_CONNECTIONS: Final = 10_000  # of the client pool (Redis's own default maxclients)


class RedisJournal(RedisFollow):
    """Streams and frames in one Redis; any number of proxy processes may share it."""

    follows_other_processes = True

    def __init__(self, url: str, *, tail_frames: int = 256,
                 orphan_check: float = ORPHAN_CHECK) -> None:
        super().__init__(tail_frames=tail_frames)
        if not 0 < orphan_check < 3600:
            raise ValueError(f"orphan_check must be a positive number of seconds, not "
                             f"{orphan_check!r}")
        self.orphan_check = orphan_check
        self.url, self.prefix = split_prefix(url)
        self.commits = 0  # group commits made (for tests and benchmarks)
        self._redis: Any = None
        self._pubsub: Any = None
        self._listener: asyncio.Task[None] | None = None
        self._shas: dict[str, str] = {}
        self._pending: list[tuple[str, Sequence[FrameRecord], StreamState,
                                  asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._written: dict[str, StreamState] = {}  # the state last stored, per live stream

    # -- keys ---------------------------------------------------------------------------------

    def _key(self, stream_id: str, kind: str) -> str:
        return f"{self.prefix}{{{stream_id}}}:{kind}"

    def _global(self, name: str) -> str:
        return self.prefix + name

    @property
    def _channel(self) -> str:
        return self.prefix + "cancel"

    # -- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        import redis.asyncio  # the I/O dependency, only when a Redis store is used

        # redis-py's pool allows 100 connections by default: 100 readers blocked on other
        # replicas' streams, or a burst of creates, and the next command failed with
        # MaxConnectionsError. Redis itself serves 10,000 clients by default.
        self._redis = redis.asyncio.Redis.from_url(
            self.url, decode_responses=False, socket_connect_timeout=5, socket_keepalive=True,
            socket_timeout=self.orphan_check + SOCKET_TIMEOUT_MARGIN, health_check_interval=30,
            max_connections=MAX_CONNECTIONS,
        )
        await self._load_scripts()
        self._pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        await self._pubsub.subscribe(self._channel)
        self._listener = asyncio.get_running_loop().create_task(
            self._listen(), name="unbroken-journal-cancels")
        await super().open()

    async def close(self) -> None:
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
            self._listener = None
        if self._pubsub is not None:
            await self._pubsub.aclose()
            self._pubsub = None
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None
        await super().close()

    async def _load_scripts(self) -> None:
        for name in ("CREATE", "APPEND", "PURGE", "PURGE_TOMBSTONES", "SET_LEASE", "RENEW",
                     "CLAIM", "RELEASE", "ANSWERED", "DISCARD"):
            self._shas[name] = await self._redis.script_load(getattr(redis_scripts, name))

    async def _eval(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run a script by its hash, loading the scripts again if Redis lost them (restart)."""
        from redis.exceptions import NoScriptError

        if self._redis is None:
            raise RuntimeError("the journal is not open")
        try:
            return await self._redis.evalsha(self._shas[name], len(keys), *keys, *args)
        except NoScriptError:
            await self._load_scripts()
            return await self._redis.evalsha(self._shas[name], len(keys), *keys, *args)

    async def _listen(self) -> None:
        """Cancel requests from every replica; the one producing the stream acts on it."""
        while True:
            try:
                async for message in self._pubsub.listen():
                    if message.get("type") == "message" and self.on_cancel is not None:
                        self.on_cancel(bytes(message["data"]).decode())
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a lost connection: redis-py resubscribes on reconnect
                # One line a second while Redis is away; /healthz says so too.
                log_event("journal.cancel_channel_lost", level=logging.WARNING,
                          error=type(error).__name__, detail=str(error))
                await asyncio.sleep(1.0)

    # -- writes -------------------------------------------------------------------------------

    async def _create(self, meta: StreamMeta, state: StreamState, lease: Lease | None) -> None:
        stream_id = meta.stream_id
        idem = "" if meta.idempotency_hash is None else self._global(
            "idem:" + meta.idempotency_hash)
        owners = "" if lease is None else self._global("owner:" + lease.owner)
        created_by = "" if meta.credential_hash is None else self._global(
            "created:" + meta.credential_hash)
        try:
            await self._eval("CREATE", [
                self._key(stream_id, "s"), self._global("unfinished"), self._global("updated"),
                idem, owners, self._global("created"), created_by,
            ], [
                stream_id, meta_json(meta), state_json(state), state.status.value,
                meta.token_hash, meta.credential_hash or "",
                "" if lease is None else lease.owner,
                "" if lease is None else repr(lease.expires),
                repr(state.updated), "1" if state.ended else "0", meta.idempotency_hash or "",
                repr(meta.created),
            ])
        except Exception as error:
            raise refusal(error) from error

    async def _answered(self, meta: StreamMeta) -> None:
        try:
            await self._eval("ANSWERED", [self._key(meta.stream_id, "s")],
                             [meta_json(meta), meta.stream_id])
        except Exception as error:
            raise refusal(error) from error

    async def _discard(self, stream_id: str) -> None:
        self._written.pop(stream_id, None)
        keys = [self._key(stream_id, kind) for kind in "sfex"]
        keys += [self._global(name) for name in ("unfinished", "updated", "created")]
        await self._eval("DISCARD", keys, [stream_id, self.prefix])

    def _store(
        self, stream_id: str, frames: Sequence[FrameRecord], state: StreamState
    ) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        if self._redis is None:
            future.set_exception(RuntimeError("the journal is not open"))
            return future
        self._pending.append((stream_id, frames, state, future))
        if self._flusher is None or self._flusher.done():
            # Starts on the next turn: everything appended in this one goes in one call.
            self._flusher = loop.create_task(self._flush(), name="unbroken-journal-commit")
        return future

    async def _flush(self) -> None:
        """Send the queued appends, one script call per batch, in order; wake readers, then
        writers. An append Redis refused fails alone; a lost connection fails the batch."""
        while self._pending:
            batch, self._pending = self._pending, []
            started = time.perf_counter()
            try:
                results = await self._commit(batch)
            except Exception as error:
                for *_, future in batch:
                    if not future.done():
                        future.set_exception(error)
                continue
            self.commits += 1
            if self.observer is not None:
                self.observer.committed(time.perf_counter() - started)
            for (stream_id, frames, state, future), result in zip(batch, results, strict=True):
                if isinstance(result, Exception):
                    if not future.done():
                        future.set_exception(refusal(result))
                    continue
                self._landed(stream_id, frames, state)
                if not future.done():
                    future.set_result(None)

    async def _commit(self, batch: Sequence[tuple[str, Sequence[FrameRecord], StreamState,
                                                  Any]]) -> list[Any]:
        """One script call for the whole batch; per append, its new last seq or the refusal."""
        from redis.exceptions import NoScriptError, ResponseError

        writes = [state.must_write_after(self._written.get(stream_id))
                  for stream_id, _frames, state, _ in batch]
        blob = packed_appends([(stream_id, frames, state, write) for (stream_id, frames, state, _),
                               write in zip(batch, writes, strict=True)])
        try:
            replies = await self._redis.evalsha(self._shas["APPEND"], 0, self.prefix, blob)
        except NoScriptError:  # Redis restarted and lost its script cache: nothing ran
            await self._load_scripts()
            replies = await self._redis.evalsha(self._shas["APPEND"], 0, self.prefix, blob)
        results: list[Any] = []
        for (stream_id, _frames, state, _), write, reply in zip(batch, writes, replies,
                                                               strict=True):
            if isinstance(reply, bytes):
                results.append(ResponseError(reply.decode()))
                continue
            if state.ended:
                self._written.pop(stream_id, None)
            elif write:
                self._written[stream_id] = state
            results.append(reply)
        return results

    def release(self, stream_id: str) -> None:
        self._written.pop(stream_id, None)  # its producer stopped without its final append
        super().release(stream_id)

    # -- reads --------------------------------------------------------------------------------

    async def read_after(self, stream_id: str, seq: int, limit: int) -> list[FrameRecord]:
        entries = await self._redis.xrange(self._key(stream_id, "f"), min=f"0-{seq + 1}",
                                           max="+", count=limit)
        return [frame_from(entry) for entry in entries]

    async def get(self, stream_id: str, *, with_text: bool = True) -> StreamRecord | None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hmget(self._key(stream_id, "s"), "meta", "state", "top")
            if with_text:
                pipe.get(self._key(stream_id, "x"))
            replies = await pipe.execute()
        meta, state, top = replies[0]
        if meta is None:
            return None
        text = (replies[1] or b"").decode() if with_text else ""
        found: StreamRecord = record_from(meta, state, top, text)
        return found

    async def tombstone(self, stream_id: str) -> Tombstone | None:
        token, cred = await self._redis.hmget(self._key(stream_id, "t"), "token", "cred")
        if token is None:
            return None
        return Tombstone(stream_id=stream_id, token_hash=token.decode(),
                         credential_hash=cred.decode() or None)

    async def unfinished(self) -> list[str]:
        members = await self._redis.smembers(self._global("unfinished"))
        return sorted(member.decode() for member in members)

    async def _list(self, query: StreamQuery) -> list[StreamRecord]:
        return await listed(self._redis, self.prefix, query)

    async def find_idempotent(self, idempotency_hash: str) -> StreamRecord | None:
        stream_id = await self._redis.get(self._global("idem:" + idempotency_hash))
        return None if stream_id is None else await self.get(stream_id.decode(),
                                                             with_text=False)

    # -- leases and retention -----------------------------------------------------------------

    async def lease(self, stream_id: str) -> Lease | None:
        owner, expires = await self._redis.hmget(self._key(stream_id, "s"), "owner", "expires")
        if not owner:
            return None
        return Lease(owner.decode(), float(expires))

    async def set_lease(self, stream_id: str, lease: Lease) -> None:
        try:
            await self._eval("SET_LEASE", [self._key(stream_id, "s")],
                             [lease.owner, repr(lease.expires), self.prefix, stream_id])
        except Exception as error:
            raise refusal(error) from error

    async def renew_leases(self, owner: str, expires: float) -> int:
        renewed: int = await self._eval("RENEW", [self._global("owner:" + owner)],
                                        [owner, repr(expires), self.prefix])
        return renewed

    async def _purge(self, older_than: float, keep: frozenset[str]) -> int:
        now = time.time()
        await self._eval("PURGE_TOMBSTONES", [self._global("tombstones")],
                         [repr(older_than), self.prefix])
        old = await self._redis.zrangebyscore(self._global("updated"), "-inf",
                                              f"({older_than!r}")
        purged = 0
        for raw in old:
            stream_id = raw.decode()
            if stream_id in keep:
                continue
            keys = [self._key(stream_id, kind) for kind in "sfext"]
            keys += [self._global(name)
                     for name in ("unfinished", "updated", "tombstones", "created")]
            purged += await self._eval("PURGE", keys, [stream_id, repr(now), self.prefix])
        return purged

    # -- other processes ----------------------------------------------------------------------

    async def claim_idempotent(self, idempotency_hash: str, claimer: str, ttl: float,
                               replacing: str | None = None) -> bool:
        held: int = await self._eval("CLAIM", [self._global("idem:" + idempotency_hash)],
                                     [claimer, max(1, round(ttl * 1000)), replacing or ""])
        return held == 1

    async def release_idempotent(self, idempotency_hash: str, claimer: str) -> None:
        await self._eval("RELEASE", [self._global("idem:" + idempotency_hash)], [claimer])

    async def problem(self) -> str | None:
        """``None`` if Redis answers a PING within ``PING_TIMEOUT`` seconds, else why not."""
        try:
            async with asyncio.timeout(PING_TIMEOUT):
                await self._redis.ping()
        except TimeoutError:
            return f"Redis did not answer within {PING_TIMEOUT} s"
        except Exception as error:  # whatever it is, the replica cannot serve streams
            return f"Redis: {error}"
        return None

    async def request_cancel(self, stream_id: str) -> bool:
        """Ask every replica to stop the stream's producer; whether any replica listens."""
        receivers: int = await self._redis.publish(self._channel, stream_id)
        return receivers > 0
