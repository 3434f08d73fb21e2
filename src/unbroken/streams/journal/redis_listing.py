"""``RedisJournal.list_streams``: a walk down a sorted set of stream ids by creation time.

``CREATE`` adds each stream to ``Pcreated`` and, when a credential created it, to
``Pcreated:<credential hash>`` (score: its creation time); ``PURGE`` removes it from both, in
the same scripts, so a purged stream is never listed. A page reads the index newest first
(``ZREVRANGEBYSCORE``, equal times in descending id order, which is the listing's order) and
then each candidate's hash, both in batches: without a status filter one batch of
``limit + 1`` ids serves a page (O(page)); a status filter reads on until the page is full
or the index is done, so its cost grows with the streams walked past.

Streams created before these indexes existed (a Redis written by an older proxy) are not in
them and are not listed; they stay readable by id and leave with the retention. An index entry
whose stream is gone (purged by an older replica) is skipped and removed.
"""

from __future__ import annotations

from typing import Any, Final

from .listing import StreamQuery
from .records import StreamRecord
from .redis_records import record_from

__all__ = ["STATUS_BATCH", "listed"]

STATUS_BATCH: Final = 256  # ids read per round while a status filter skips streams


async def listed(redis: Any, prefix: str, query: StreamQuery) -> list[StreamRecord]:
    """Up to ``query.limit + 1`` streams ``query`` admits, newest first."""
    index = prefix + "created" + ("" if query.credential_hash is None
                                  else ":" + query.credential_hash)
    wanted = query.limit + 1
    batch = wanted if not query.statuses else max(wanted, STATUS_BATCH)
    # The upper end: the cursor's time (inclusive: the ids after it at that time count) or
    # ``until`` (exclusive); ``passed`` ids at exactly the upper time were read already.
    top: float | None = None
    if query.before is not None:
        top = query.before[0]
    elif query.until is not None:
        top = query.until
    inclusive = query.before is not None
    passed = 0
    lowest = "-inf" if query.since is None else repr(query.since)
    found: list[StreamRecord] = []
    while len(found) < wanted:
        highest = "+inf" if top is None else (repr(top) if inclusive else f"({top!r}")
        entries: list[tuple[bytes, float]] = await redis.zrevrangebyscore(
            index, highest, lowest, start=passed, num=batch, withscores=True)
        if not entries:
            break
        found += await _admitted(redis, prefix, index, query, entries)
        if len(entries) < batch:
            break
        last = entries[-1][1]
        ties = sum(1 for _member, score in entries if score == last)
        passed = passed + len(entries) if inclusive and last == top else ties
        top, inclusive = last, True
    return found[:wanted]


async def _admitted(redis: Any, prefix: str, index: str, query: StreamQuery,
                    entries: list[tuple[bytes, float]]) -> list[StreamRecord]:
    """The entries' streams that the query admits, in order (one round trip)."""
    ids = [member.decode() for member, _score in entries]
    async with redis.pipeline(transaction=False) as pipe:
        for stream_id in ids:
            pipe.hmget(f"{prefix}{{{stream_id}}}:s", "meta", "state", "top")
        replies = await pipe.execute()
    admitted: list[StreamRecord] = []
    gone: list[str] = []
    for stream_id, (meta, state, top) in zip(ids, replies, strict=True):
        if meta is None:
            gone.append(stream_id)
            continue
        record = record_from(meta, state, top)
        if query.admits(record.meta, record.state):
            admitted.append(record)
    if gone:
        await redis.zrem(index, *gone)
    return admitted
