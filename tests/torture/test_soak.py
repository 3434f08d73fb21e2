"""Soak: a real proxy process (SQLite file) under steady load for ``PROFILE.soak_seconds``.

``PROFILE.soak_concurrency`` workers each start streams back to back (every dialect in turn),
read a random number of frames, and about half the time hang up and resume on
``GET /v1/streams/{id}/events`` after the last seq they saw. Every stream must end with exactly
the reply's text, each frame once. The proxy's RSS, open files and journal size are sampled at
start, middle and end: open files must come back (no descriptor leak) and RSS stay bounded.
"""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx2
from tests.integration.hardening_process import ProxyProcess
from tests.integration.test_proxy_support import CALLS, DIALECTS, message_of
from tests.servers import serve_in_thread
from tests.torture.profile import PROFILE
from tests.torture.streams import AUTH
from tests.torture.tally import Tally

from unbroken.framing import SSEDecoder
from unbroken.mock import create_app, reply_text

TOKENS = 12


@dataclass(frozen=True, slots=True)
class Sample:
    rss_kib: int
    open_files: int
    journal_bytes: int


def _sample(pid: int, store: Path) -> Sample:
    status = Path(f"/proc/{pid}/status").read_text()
    rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    files = len(os.listdir(f"/proc/{pid}/fd"))
    journal = sum(path.stat().st_size for path in store.parent.glob(store.name + "*"))
    return Sample(rss, files, journal)


def _one_stream(base: str, rng: random.Random, index: int) -> tuple[bool, bool, int, int]:
    """(exact, resumed, duplicated frames, lost frames) of one stream."""
    dialect = DIALECTS[index % len(DIALECTS)]
    call = CALLS[dialect]
    seed = rng.randrange(100_000)
    headers = call.headers(f"seed={seed}; tokens={TOKENS}; delay_ms=2") | {
        "accept": "text/event-stream"}
    frames: list[tuple[int, bytes]] = []
    stop_after = rng.randrange(1, call.total(TOKENS) + 2)
    resumed = rng.random() < 0.5
    with httpx2.stream("POST", base + call.path, json=call.body, headers=headers,
                       timeout=30) as response:
        assert response.status_code == 200
        stream_id = response.headers["unbroken-stream-id"]
        if dialect != "ollama":
            decoder = SSEDecoder()
            for chunk in response.iter_raw():
                for event in decoder.receive_data(chunk):
                    if event.block_id is not None:
                        frames.append((int(event.block_id.rpartition(":")[2]), event.raw))
                if resumed and len(frames) >= stop_after:
                    break  # hang up mid-stream
            else:
                resumed = False
        else:
            resumed = True  # NDJSON without ids: read on the events endpoint
    if resumed:
        last = frames[-1][0] if frames else 0
        with httpx2.stream("GET", f"{base}/v1/streams/{stream_id}/events", timeout=30,
                           headers=AUTH | {"last-event-id": f"{stream_id}:{last}"}) as rest:
            decoder = SSEDecoder()
            for chunk in rest.iter_raw():
                for event in decoder.receive_data(chunk):
                    if event.block_id is not None:
                        frames.append((int(event.block_id.rpartition(":")[2]), event.raw))
    seqs = [seq for seq, _ in frames]
    total = call.total(TOKENS)
    duplicated = len(seqs) - len(set(seqs))
    lost = len(set(range(1, total + 1)) - set(seqs))
    body = b"".join(raw for _, raw in frames)
    if dialect == "ollama":
        decoder = SSEDecoder()
        body = b"".join(e.data.encode() + b"\n" for e in decoder.receive_data(body))
    text = message_of(dialect, body).text
    return text == reply_text(seed, TOKENS), resumed, duplicated, lost


def test_soak(tmp_path: Path) -> None:
    store, log = tmp_path / "journal.db", tmp_path / "proxy.log"
    results: list[tuple[bool, bool, int, int]] = []
    failures: list[str] = []
    lock = threading.Lock()
    with serve_in_thread(create_app()) as mock, ProxyProcess.start(mock, store, log) as proxy:
        pid = proxy.process.pid
        samples = {"start": _sample(pid, store)}
        deadline = time.monotonic() + PROFILE.soak_seconds

        def work(worker: int) -> None:
            rng = random.Random(worker)
            index = worker
            while time.monotonic() < deadline:
                try:
                    outcome = _one_stream(proxy.base_url, rng, index)
                except Exception as error:  # recorded, then asserted below
                    with lock:
                        failures.append(f"worker {worker}: {error!r}")
                    return
                with lock:
                    results.append(outcome)
                index += 1

        workers = [threading.Thread(target=work, args=(n,), daemon=True)
                   for n in range(PROFILE.soak_concurrency)]
        for thread in workers:
            thread.start()
        time.sleep(PROFILE.soak_seconds / 2)
        samples["middle"] = _sample(pid, store)
        for thread in workers:
            thread.join(PROFILE.soak_seconds + 60)
        time.sleep(0.5)  # the last streams' connections close
        samples["end"] = _sample(pid, store)
        assert not any(thread.is_alive() for thread in workers)
    exact = sum(r[0] for r in results)
    Tally(f"soak ({PROFILE.soak_seconds:.0f} s, {PROFILE.soak_concurrency} workers)",
          streams=len(results), faults=sum(r[1] for r in results), exact=exact,
          duplicated=sum(r[2] for r in results), lost=sum(r[3] for r in results),
          notes={name: {"rss_kib": s.rss_kib, "open_files": s.open_files,
                        "journal_bytes": s.journal_bytes} for name, s in samples.items()}
          ).write()
    assert failures == []
    assert results and exact == len(results)
    assert sum(r[2] + r[3] for r in results) == 0
    # No descriptor leak: at the end (no stream open) as many files as at the start, give or
    # take the journal's WAL/shm files and a few pooled upstream connections.
    assert samples["end"].open_files <= samples["start"].open_files + 8, samples
    # RSS bounded: the second half of the run adds less than the first half did, plus slack.
    start, middle, end = (samples[k].rss_kib for k in ("start", "middle", "end"))
    assert end - middle <= max(middle - start, 0) + 20 * 1024, samples
