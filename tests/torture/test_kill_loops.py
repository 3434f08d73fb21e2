"""Kill loops: the proxy process SIGKILLed at random moments under 20+ concurrent streams.

SQLite: each round starts a proxy process on one journal file, starts the streams (every dialect,
raw readers with an ``Idempotency-Key`` and ``unbroken.stream`` readers with the default retry),
kills the process at a seeded random moment — right away (before response heads), in the first
frames, or mid-stream — and restarts it on the same file. Between the proxy and the mock a fault
relay holds some upstream responses before their head (so some kills land while a generation
runs upstream and its response head has not come back). In front of the proxy a relay keeps one
address across the restart (its target is moved to the new process's port).

After the restart each raw reader resumes (``GET /v1/streams/{id}/events`` after its last seq,
or the same POST with its ``Idempotency-Key`` if it never got a head). Asserted, per stream:
every frame a reader saw before the kill is served identically after; the reader ends with
exactly the journaled frames (none twice, none missing); no stream is left ``streaming`` once
its lease ran out; every generation at the mock has a record; no traceback in any log.

Redis: two replicas on one real ``redis-server``; the streams are started on replica A, A is
killed, the readers resume on replica B; the same assertions.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest
from tests.fault_relay import Fault, FaultRelay
from tests.integration.hardening_process import ProxyProcess
from tests.integration.test_proxy_support import CALLS, DIALECTS, mock_counts
from tests.servers import serve_in_thread
from tests.torture.profile import PROFILE
from tests.torture.streams import AUTH, settled_status
from tests.torture.tally import Tally

from unbroken.client import stream
from unbroken.framing import SSEDecoder
from unbroken.mock import create_app

LEASE = ("--lease-ttl", "2", "--lease-renew", "0.5", "--log-level", "info")
TOKENS = 24
DELAY_MS = 60  # 24 tokens: a stream runs ~1.5 s, so most kills land mid-stream
# The restart waits this long before the new process starts: longer than the default retry's
# ~1.5 s, well inside the ~15 s budget issue 21 asks for.
RESTART_PAUSE_S = 3.0
HEAD_STALL_S = 3.0  # an upstream response held before its head
READ_S = 30.0


@dataclass
class Reader:
    """One stream as a raw reader saw it: ``seen`` before the kill, ``after`` on resume."""

    dialect: str
    scenario: str
    key: str = field(default_factory=lambda: uuid.uuid4().hex)
    stream_id: str | None = None
    seen: list[tuple[int, str]] = field(default_factory=list)  # (seq, data)
    after: list[tuple[int, str]] = field(default_factory=list)
    library: bool = False
    library_status: str = ""
    library_text: str = ""
    resume_head_s: float | None = None  # from the restart until the resume's response head


def _port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


def _read_frames(response: httpx2.Response, into: list[tuple[int, str]]) -> None:
    """Append (seq, data) of each whole SSE frame with an id until the body ends or breaks."""
    decoder = SSEDecoder()
    try:
        for chunk in response.iter_raw():
            for frame in decoder.receive_data(chunk):
                if frame.block_id is not None:
                    into.append((int(frame.block_id.rpartition(":")[2]), frame.data))
    except httpx2.TransportError:
        pass


def _first_read(base: str, reader: Reader) -> None:
    call = CALLS[reader.dialect]
    headers = call.headers(reader.scenario) | {"accept": "text/event-stream",
                                               "idempotency-key": reader.key}
    try:
        with httpx2.stream("POST", base + call.path, json=call.body, headers=headers,
                           timeout=READ_S) as response:
            if response.status_code != 200:
                return
            reader.stream_id = response.headers["unbroken-stream-id"]
            if reader.dialect == "ollama":
                return  # NDJSON without ids: its frames are read from the events endpoint
            _read_frames(response, reader.seen)
    except httpx2.TransportError:
        pass


def _library_read(base: str, reader: Reader) -> None:
    call = CALLS[reader.dialect]
    seen: list[str] = []

    def hook(response: httpx2.Response) -> None:
        if "unbroken-stream-id" in response.headers:
            seen.append(response.headers["unbroken-stream-id"])

    with (
        httpx2.Client(event_hooks={"response": [hook]}, timeout=READ_S) as http,
        stream("POST", base + call.path, dialect=call.dialect, json=call.body, client=http,
               headers=call.headers(reader.scenario), total_timeout=READ_S,
               raise_on_error=False) as s,
    ):
        text = "".join(s.iter_text())
    reader.stream_id = seen[-1] if seen else None
    reader.library_status, reader.library_text = s.message.status.value, text


def _resume(base: str, reader: Reader, ready: float) -> None:
    """After the restart (at ``ready``, monotonic): the rest of the stream (bounded)."""
    if reader.library:
        return
    for attempt in range(6):
        if reader.stream_id is None:
            _first_read(base, reader)  # the same POST, the same Idempotency-Key
            if reader.stream_id is None:
                time.sleep(0.2 * (attempt + 1))
                continue
        last = max([seq for seq, _ in reader.seen + reader.after], default=0)
        got: list[tuple[int, str]] = []
        try:
            with httpx2.stream("GET", f"{base}/v1/streams/{reader.stream_id}/events",
                               headers=AUTH | {"last-event-id": f"{reader.stream_id}:{last}"},
                               timeout=READ_S) as response:
                if reader.resume_head_s is None:
                    reader.resume_head_s = time.monotonic() - ready
                if response.status_code in (200, 204):
                    _read_frames(response, got)
                    reader.after += got
                    if response.status_code == 204 or _ended(base, reader.stream_id):
                        return
        except httpx2.TransportError:
            pass
        time.sleep(0.2 * (attempt + 1))


def _ended(base: str, stream_id: str) -> bool:
    return bool(settled_status(base, stream_id, within=0.0)["status"] not in (
        "pending", "streaming"))


@dataclass
class Round:
    readers: list[Reader]
    statuses: dict[str, dict[str, Any]]
    journaled: dict[str, list[tuple[int, str]]]  # the whole stream from the events endpoint
    generations: int
    listed: int  # streams GET /v1/streams knows for KEY
    kill_at: str
    logs: list[Path]


def _scenarios(rng: random.Random, count: int) -> list[Reader]:
    readers = []
    for index in range(count):
        dialect = DIALECTS[index % len(DIALECTS)]
        readers.append(Reader(dialect, f"seed={rng.randrange(10_000)}; tokens={TOKENS}; "
                                        f"delay_ms={DELAY_MS}",
                              library=index % 4 == 3))
    return readers


MOMENTS = ("upstream asked, no head yet", "first frames", "mid-stream")


def _run_round(rng: random.Random, readers: list[Reader], front: FaultRelay, mock: str,
               kill: Callable[[], None], after_kill: Callable[[], None]) -> str:
    """Start every reader through ``front``, kill at a random moment, return that moment."""
    moment = MOMENTS[rng.randrange(len(MOMENTS))]
    with ThreadPoolExecutor(max_workers=len(readers)) as pool:
        futures = [pool.submit(_library_read if r.library else _first_read, front.url, r)
                   for r in readers]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not _reached(moment, readers, mock):
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 0.05))
        kill()
        after_kill()
        ready = time.monotonic()
        for future in futures:
            future.result(timeout=READ_S * 3)
        list(pool.map(lambda r: _resume(front.url, r, ready), readers))
    return moment


def _reached(moment: str, readers: list[Reader], mock: str) -> bool:
    if moment == "upstream asked, no head yet":
        return sum(mock_counts(mock).get("generations", {}).values()) >= 3
    frames = sorted((len(r.seen) for r in readers if not r.library), reverse=True)
    if moment == "first frames":
        return frames[0] >= 1
    return frames[len(frames) // 2] >= TOKENS // 2


def _finish(base: str, readers: list[Reader], mock: str, kill_at: str,
            logs: list[Path]) -> Round:
    statuses, journaled = {}, {}
    for reader in readers:
        if reader.stream_id is None:
            continue
        statuses[reader.stream_id] = settled_status(base, reader.stream_id, within=20.0)
        frames: list[tuple[int, str]] = []
        with httpx2.stream("GET", f"{base}/v1/streams/{reader.stream_id}/events",
                           headers=AUTH, timeout=READ_S) as response:
            _read_frames(response, frames)
        journaled[reader.stream_id] = frames
    listing = httpx2.get(base + "/v1/streams?limit=1000", headers=AUTH, timeout=10).json()
    generations = sum(mock_counts(mock).get("generations", {}).values())
    return Round(readers, statuses, journaled, generations, len(listing["streams"]), kill_at,
                 logs)


def _held_heads(exchange: int) -> list[Fault]:
    return [Fault.stall(HEAD_STALL_S)] if exchange % 5 == 4 else []


@pytest.fixture(scope="module")
def mock_and_upstream() -> Iterator[tuple[str, FaultRelay]]:
    with serve_in_thread(create_app()) as mock:
        # Every fifth upstream response is held before its head: a kill then lands while the
        # generation runs upstream with no response head back yet.
        with FaultRelay(_port(mock), unit="exchange", plan=_held_heads) as upstream:
            yield mock, upstream


@pytest.fixture(scope="module")
def sqlite_rounds(mock_and_upstream: tuple[str, FaultRelay],
                  tmp_path_factory: pytest.TempPathFactory) -> list[Round]:
    mock, upstream = mock_and_upstream
    directory = tmp_path_factory.mktemp("kill-sqlite")
    store = directory / "journal.db"
    rng = random.Random(24)
    rounds = []
    for number in range(PROFILE.kill_rounds):
        assert httpx2.post(mock + "/_mock/reset", timeout=5).status_code == 200
        store.unlink(missing_ok=True)
        log = directory / f"proxy-{number}.log"
        first = ProxyProcess.start(upstream.url, store, log, *LEASE)
        readers = _scenarios(rng, PROFILE.kill_streams)
        second: list[ProxyProcess] = []

        def restart(first: ProxyProcess = first, log: Path = log,
                    second: list[ProxyProcess] = second) -> None:
            time.sleep(RESTART_PAUSE_S)
            second.append(ProxyProcess.start(upstream.url, store, log, *LEASE))
            front.target = ("127.0.0.1", _port(second[0].base_url))

        with FaultRelay(_port(first.base_url)) as front:
            try:
                kill_at = _run_round(rng, readers, front, mock, first.kill, restart)
                rounds.append(_finish(second[0].base_url, readers, mock, kill_at, [log]))
            finally:
                first.kill()
                for process in second:
                    process.terminate()
    _tally("kill loop, SQLite (SIGKILL + restart)", rounds)
    return rounds


@pytest.fixture(scope="module")
def redis_rounds(mock_and_upstream: tuple[str, FaultRelay], redis_url: str,
                 tmp_path_factory: pytest.TempPathFactory) -> list[Round]:
    mock, upstream = mock_and_upstream
    directory = tmp_path_factory.mktemp("kill-redis")
    rng = random.Random(22)
    rounds = []
    for number in range(PROFILE.redis_rounds):
        assert httpx2.post(mock + "/_mock/reset", timeout=5).status_code == 200
        url = redis_url.rpartition("/")[0] + f"/{1 + number % 15}"
        logs = [directory / f"a-{number}.log", directory / f"b-{number}.log"]
        a = ProxyProcess.start(upstream.url, url, logs[0], *LEASE)
        b = ProxyProcess.start(upstream.url, url, logs[1], *LEASE)
        readers = _scenarios(rng, PROFILE.kill_streams)
        with FaultRelay(_port(a.base_url)) as front:
            def move(front: FaultRelay = front, b: ProxyProcess = b) -> None:
                front.target = ("127.0.0.1", _port(b.base_url))
            try:
                kill_at = _run_round(rng, readers, front, mock, a.kill, move)
                rounds.append(_finish(b.base_url, readers, mock, kill_at, logs))
            finally:
                a.kill()
                b.terminate()
    _tally("kill loop, Redis (one of two replicas)", rounds)
    return rounds


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.redis_server import running_redis
    with running_redis(tmp_path_factory.mktemp("redis")) as url:
        yield url


def _tally(name: str, rounds: list[Round]) -> None:
    tally = Tally(name, kills=len(rounds))
    for r in rounds:
        tally.streams += len(r.readers)
        tally.extra_generations += max(0, r.generations - len(r.statuses))
        for reader in r.readers:
            if reader.stream_id is None or reader.library:
                continue
            mine = reader.seen + reader.after
            whole = r.journaled[reader.stream_id]
            tally.duplicated += len(mine) - len(set(mine))
            tally.lost += len(set(whole) - set(mine))
            status = r.statuses[reader.stream_id]["status"]
            if sorted(set(mine)) == whole:
                tally.exact += status == "completed"
                tally.interrupted_with_prefix += status == "interrupted"
        tally.status_mismatches += sum(
            reader.library and reader.stream_id is not None
            and reader.library_status != r.statuses[reader.stream_id]["status"]
            for reader in r.readers)
    heads = [reader.resume_head_s for r in rounds for reader in r.readers
             if reader.resume_head_s is not None]
    tally.notes = {"kill moments": [r.kill_at for r in rounds],
                   "resume head after restart, max s": round(max(heads, default=0.0), 2),
                   "generations without a record": sum(max(0, r.generations - r.listed)
                                                       for r in rounds),
                   "streams per round": PROFILE.kill_streams}
    tally.write()


def _seen_served_identically(rounds: list[Round]) -> list[str]:
    bad = []
    for r in rounds:
        for reader in r.readers:
            if reader.stream_id is None:
                continue
            whole = dict(r.journaled.get(reader.stream_id, []))
            for seq, data in reader.seen:
                if whole.get(seq) != data:
                    bad.append(f"{reader.stream_id}:{seq} was {data[:60]!r}, now "
                               f"{whole.get(seq, '<missing>')[:60]!r}")
    return bad


def _readers_exact(rounds: list[Round]) -> list[str]:
    bad = []
    for r in rounds:
        for reader in r.readers:
            if reader.library or reader.stream_id is None:
                continue
            mine = reader.seen + reader.after
            whole = r.journaled[reader.stream_id]
            if mine != whole:
                bad.append(f"{reader.dialect} {reader.stream_id}: read "
                           f"{[s for s, _ in mine]}, journal {[s for s, _ in whole]}")
    return bad


def _left_streaming(rounds: list[Round]) -> list[str]:
    return [f"{sid}: {s['status']}" for r in rounds for sid, s in r.statuses.items()
            if s["status"] in ("pending", "streaming")]


def _tracebacks(rounds: list[Round]) -> list[str]:
    return [f"{log.name}: {line[:200]}" for r in rounds for log in r.logs
            for line in log.read_text(errors="replace").splitlines() if "Traceback" in line]


def _unrecorded(rounds: list[Round]) -> list[str]:
    # A record without a generation is fine (written ahead, the request never left); a
    # generation without a record is not.
    return [f"kill at {r.kill_at}: {r.generations} generations, {r.listed} records"
            for r in rounds if r.generations > r.listed]


def _library_mismatches(rounds: list[Round]) -> list[str]:
    """Library readers that gave up, or whose text is not the journal's. (Their status against
    the journal's is counted in the table; whether any of them ends on the proxy's error frame
    depends on the kill's moment, so issue 12 item 1 is asserted in test_relay_faults.py.)"""
    bad = []
    for r in rounds:
        for reader in r.readers:
            if not reader.library:
                continue
            if reader.stream_id is None:
                bad.append(f"{reader.dialect}: gave up ({reader.library_status}) with no stream")
                continue
            journal = r.statuses[reader.stream_id]
            if reader.library_text != journal["text"]:
                bad.append(f"{reader.dialect} {reader.stream_id}: {reader.library_status} "
                           f"{len(reader.library_text)} chars, journal {journal['status']} "
                           f"{len(journal['text'])} chars")
    return bad


# -- SQLite ------------------------------------------------------------------------------------

def test_sqlite_frames_seen_before_the_kill_are_served_identically(
        sqlite_rounds: list[Round]) -> None:
    assert _seen_served_identically(sqlite_rounds) == []


def test_sqlite_raw_readers_end_with_exactly_the_journaled_frames(
        sqlite_rounds: list[Round]) -> None:
    assert _readers_exact(sqlite_rounds) == []


def test_sqlite_no_stream_left_streaming_after_its_lease(sqlite_rounds: list[Round]) -> None:
    assert _left_streaming(sqlite_rounds) == []


def test_sqlite_no_traceback_in_any_log(sqlite_rounds: list[Round]) -> None:
    assert _tracebacks(sqlite_rounds) == []


def test_sqlite_every_generation_has_a_record(sqlite_rounds: list[Round]) -> None:
    assert _unrecorded(sqlite_rounds) == []


def test_sqlite_library_readers_with_the_default_retry_span_the_restart(
        sqlite_rounds: list[Round]) -> None:
    assert _library_mismatches(sqlite_rounds) == []


# -- Redis -------------------------------------------------------------------------------------

def test_redis_frames_seen_before_the_kill_are_served_identically(
        redis_rounds: list[Round]) -> None:
    assert _seen_served_identically(redis_rounds) == []


def test_redis_raw_readers_end_with_exactly_the_journaled_frames(
        redis_rounds: list[Round]) -> None:
    assert _readers_exact(redis_rounds) == []


def test_redis_no_stream_left_streaming_after_its_lease(redis_rounds: list[Round]) -> None:
    assert _left_streaming(redis_rounds) == []


def test_redis_no_traceback_in_any_log(redis_rounds: list[Round]) -> None:
    assert _tracebacks(redis_rounds) == []


def test_redis_every_generation_has_a_record(redis_rounds: list[Round]) -> None:
    assert _unrecorded(redis_rounds) == []
