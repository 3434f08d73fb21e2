"""The SQLite journal's frame layout: version 2 (clustered by stream) against version 3 (arrival
order plus an index), side by side in one process, and the journal itself under group commit.

A group commit of N live streams writes each stream's new frames. In the version 2 layout
(``PRIMARY KEY (stream_id, seq) WITHOUT ROWID``) the rows themselves live in N places of the
table, so a commit rewrites N full leaf pages (and their parents) into the WAL. In version 3
the rows are appended at one end of a rowid table and only the small index entries live in N
places. Both layouts get the same rows, the same pragmas (WAL, ``synchronous=NORMAL``) and the
same statements; the figure is wall time per commit and per frame, and the ratio v2 / v3.

``create`` alone: CPU per new stream, one at a time (each awaits its commit, as a quiet proxy
does) and many in one turn (one group commit), with streams already in the store (its indexes,
e.g. the listing's, are not empty).

Then the journals as the proxy drives them: ``SQLiteJournal`` and ``RedisJournal`` (against a
``redis-server`` this script starts on 127.0.0.1, when the program is installed), each stream
submitting in one turn of the event loop, one group commit per turn. For Redis the server's own
CPU (``INFO cpu``) is reported beside the proxy side's.

    python benchmarks/journal.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from unbroken.finish import Status
from unbroken.streams.journal import (
    FrameRecord,
    Journal,
    RedisJournal,
    SQLiteJournal,
    StreamMeta,
    StreamState,
)

DATA = (b'{"id":"chatcmpl-p","object":"chat.completion.chunk","created":0,"model":"m",'
        b'"choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}')
# What an upstream's answer leaves in a stream's meta (forwarded response headers).
ANSWER_HEADERS = (("x-request-id", "req_0123456789abcdef"), ("openai-processing-ms", "212"))
LAYOUTS = {
    "v2 clustered": (
        "CREATE TABLE frames (stream_id TEXT NOT NULL, seq INTEGER NOT NULL, event TEXT, "
        "data BLOB NOT NULL, text TEXT, PRIMARY KEY (stream_id, seq)) WITHOUT ROWID",
        "INSERT INTO frames VALUES (?, ?, ?, ?, ?)",
    ),
    "v3 log+index": (
        "CREATE TABLE frames (id INTEGER PRIMARY KEY, stream_id TEXT NOT NULL, "
        "seq INTEGER NOT NULL, event TEXT, data BLOB NOT NULL, text TEXT); "
        "CREATE UNIQUE INDEX frames_by_stream ON frames (stream_id, seq)",
        "INSERT INTO frames (stream_id, seq, event, data, text) VALUES (?, ?, ?, ?, ?)",
    ),
}


def layout_cost(directory: Path, name: str, streams: int, per: int, frames: int) -> float:
    """Seconds per commit of ``streams`` x ``per`` frames, over about ``frames`` frames."""
    schema, insert = LAYOUTS[name]
    path = directory / f"{name.split()[0]}-{streams}-{per}.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.executescript(schema)
    ids = [f"ub_{n:024x}" for n in range(streams)]
    commits = max(1, frames // (streams * per))
    spent = 0.0
    for turn in range(commits):
        rows = [(stream_id, turn * per + k, None, DATA, " token")
                for stream_id in ids for k in range(per)]
        started = time.perf_counter()
        conn.execute("BEGIN")
        conn.executemany(insert, rows)
        conn.execute("COMMIT")
        spent += time.perf_counter() - started
        if turn % 200 == 199:  # as the journal's checkpointer does, off the clock
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return spent / commits


async def journal_cost(journal: Journal, streams: int, per: int, frames: int) -> float:
    """CPU seconds (every thread of this process) per frame through ``journal``: every stream
    submits ``per`` frames in one turn of the event loop, as the proxy's producers do; the
    turn's submits share one group commit. CPU, not wall time: waits are idle time."""
    await journal.open()
    try:
        ids = [f"ub_{n:024x}" for n in range(streams)]
        for stream_id in ids:
            meta = StreamMeta(stream_id=stream_id, dialect="openai-chat", created=0.0,
                              media_type="text/event-stream", token_hash="t",
                              credential_hash="c", request_path="/v1/chat/completions")
            await journal.create(meta, StreamState(status=Status.STREAMING, updated=time.time(),
                                                   last_seq=0))
        turns = max(1, frames // (streams * per))
        started = time.process_time()
        for turn in range(turns):
            last = (turn + 1) * per
            state = StreamState(status=Status.STREAMING, updated=time.time(), last_seq=last)
            records = [FrameRecord(turn * per + k + 1, None, DATA, " token") for k in range(per)]
            landed = [journal.submit(stream_id, records, state) for stream_id in ids]
            await landed[-1]
        return (time.process_time() - started) / (turns * streams * per)
    finally:
        await journal.close()


async def create_cost(journal: Journal, existing: int, creates: int, together: int,
                      redis_url: str | None = None, *,
                      answered: bool = False) -> tuple[float, float]:
    """CPU seconds per ``create`` in this process and in the Redis server at ``redis_url``
    (0.0 without one), ``together`` creates per turn of the loop, after ``existing`` streams
    were created (untimed). ``answered``: each create is followed by the write-ahead's second
    write, ``answered`` (the upstream's media type and headers), as the proxy does."""
    await journal.open()
    try:
        def meta(n: int) -> StreamMeta:
            return StreamMeta(stream_id=f"ub_{n:024x}", dialect="openai-chat",
                              created=1.7e9 + n * 0.001, media_type="text/event-stream",
                              token_hash="t" * 64, credential_hash=f"{n % 50:064x}",
                              request_path="/v1/chat/completions")

        state = StreamState(status=Status.PENDING, updated=time.time(), last_seq=0)
        for start in range(0, existing, 50):
            await asyncio.gather(*(journal.create(meta(n), state)
                                   for n in range(start, min(existing, start + 50))))
        async def start_one(n: int) -> None:
            await journal.create(meta(n), state)
            if answered:
                await journal.answered(replace(meta(n), response_headers=ANSWER_HEADERS))

        server = 0.0 if redis_url is None else await redis_cpu(redis_url)
        started = time.process_time()
        for start in range(existing, existing + creates, together):
            await asyncio.gather(*(start_one(n) for n in range(start, start + together)))
        ours = (time.process_time() - started) / creates
        if redis_url is not None:
            server = (await redis_cpu(redis_url) - server) / creates
        return ours, server
    finally:
        await journal.close()


@contextlib.contextmanager
def redis_server(directory: Path) -> Iterator[str | None]:
    """A throwaway redis-server on 127.0.0.1 (no persistence); ``None`` without the program."""
    program = shutil.which("redis-server")
    if program is None:
        yield None
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [program, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly",
         "no", "--dir", str(directory)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(500):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                break
            time.sleep(0.01)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(timeout=10)


async def redis_cpu(url: str) -> float:
    """The server's CPU seconds so far (user + system)."""
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(url)
    try:
        info = await client.info("cpu")
    finally:
        await client.aclose()
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def redis_costs(url: str, streams: int, per: int, frames: int) -> tuple[float, float]:
    """This process's and the server's CPU seconds per frame through ``RedisJournal``."""
    before = await redis_cpu(url)
    ours = await journal_cost(RedisJournal(f"{url}?prefix=b{streams}x{per}:"), streams, per,
                              frames)
    server = (await redis_cpu(url) - before) / frames
    return ours, server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer frames (a smoke test)")
    parser.add_argument("--create-only", action="store_true",
                        help="only the cost of starting a stream (create, and write-ahead)")
    options = parser.parse_args()
    if options.create_only:
        with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp)) as url:
            create_section(Path(tmp), url, 400 if options.quick else 4_000)
        return
    frames = 6_000 if options.quick else 60_000
    print(f"frames per case: {frames}; cpus={os.cpu_count()}; sqlite {sqlite3.sqlite_version}")
    print(f"{'streams':>8}{'frames/stream':>15}{'layout':>15}{'us/commit':>11}{'us/frame':>10}"
          f"{'v2/v3':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for streams in (20, 100):
            for per in (1, 3):
                costs = {name: layout_cost(Path(tmp), name, streams, per, frames)
                         for name in LAYOUTS}
                ratio = costs["v2 clustered"] / costs["v3 log+index"]
                for name, cost in costs.items():
                    print(f"{streams:>8}{per:>15}{name:>15}{cost * 1e6:>11.0f}"
                          f"{cost * 1e6 / (streams * per):>10.1f}"
                          f"{(f'{ratio:.2f}x' if name.startswith('v3') else ''):>8}")
        print("\nThe journals under group commit, CPU us per frame (this process: every "
              "thread, the SQLite checkpointer too; Redis: its server too)")
        print(f"{'streams':>8}{'frames/stream':>15}{'SQLite':>9}{'Redis':>8}{'server':>8}"
              f"{'Redis+server':>14}")
        with redis_server(Path(tmp)) as url:
            for streams in (20, 100):
                for per in (1, 3):
                    path = str(Path(tmp) / f"journal-{streams}-{per}.db")
                    sqlite_cost = asyncio.run(
                        journal_cost(SQLiteJournal(path), streams, per, frames))
                    row = f"{streams:>8}{per:>15}{sqlite_cost * 1e6:>9.1f}"
                    if url is None:
                        print(row + "   (no redis-server installed)")
                        continue
                    ours, server = asyncio.run(redis_costs(url, streams, per, frames))
                    print(row + f"{ours * 1e6:>8.1f}{server * 1e6:>8.1f}"
                                f"{(ours + server) * 1e6:>14.1f}")
            create_section(Path(tmp), url, 400 if options.quick else 4_000)


def create_section(tmp: Path, url: str | None, creates: int) -> None:
    """CPU per new stream: ``create`` alone, and with the write-ahead's ``answered`` (the
    proxy's two writes per stream), side by side in one process."""
    print(f"\ncreate: CPU us per new stream ({creates} creates after 10,000 streams; "
          "this process; Redis: its server too)")
    print(f"{'per turn':>9}{'writes':>22}{'SQLite':>9}{'Redis':>8}{'server':>8}")
    for together in (1, 50):
        for answered in (False, True):
            name = "create + answered" if answered else "create"
            path = str(tmp / f"create-{together}-{answered}.db")
            sqlite_cost, _ = asyncio.run(create_cost(SQLiteJournal(path), 10_000, creates,
                                                     together, answered=answered))
            row = f"{together:>9}{name:>22}{sqlite_cost * 1e6:>9.1f}"
            if url is None:
                print(row + "   (no redis-server installed)")
                continue
            ours, server = asyncio.run(create_cost(
                RedisJournal(f"{url}?prefix=c{together}{int(answered)}:"), 10_000, creates,
                together, url, answered=answered))
            print(row + f"{ours * 1e6:>8.1f}{server * 1e6:>8.1f}")

if __name__ == "__main__":
    main()
