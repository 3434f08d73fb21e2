"""Faults on both sides of the proxy: client <-> relay <-> proxy <-> relay <-> mock upstream.

For every dialect and every reader (``unbroken.stream``, ``unbroken.astream``, a raw
``Last-Event-ID`` reader), streams run one after another, each with a fault drawn (seeded) from:
a reset after N bytes, a reset inside a UTF-8 character, a reset inside a body line (mid-frame),
a half-close, a stall, a 1-byte trickle, a fixed delay; on the upstream side, the client side or
both. The proxy journals to a real SQLite file. Per stream, against the proxy's journal
(``GET /v1/streams/{id}``) and the upstream's whole reply:

- the journal holds whole deltas only (a prefix of the reply, never half a character);
- the reader's text is exactly the journaled text: the whole reply when completed, else the
  journaled prefix with ``interrupted`` — zero duplicated and zero lost characters (raw reader:
  every seq 1..last exactly once);
- every generation at the mock is one the reader reports (``Message.generations``): the default
  ``Retry`` may start a second one when the proxy ended a stream interrupted before any content
  (issue 12 item 2; ``Retry(after_response=False)`` forbids it), never silently; the raw reader
  (one ``Idempotency-Key``) makes exactly one;
- the reader's status is the proxy's journaled status.

The streams run once (module fixture); each property is its own test, so that a known bug
marks exactly the property it breaks.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx2
import pytest
from tests.fault_relay import Cut, Fault, FaultRelay
from tests.integration.test_proxy_support import CALLS, DIALECTS, mock_counts, running_proxy
from tests.servers import serve_in_thread
from tests.torture.profile import PROFILE
from tests.torture.streams import Read, Verdict, read_async, read_raw, read_sync, settled_status
from tests.torture.tally import Tally

from unbroken.mock import create_app, reply_deltas

TOKENS = 16
READERS: dict[str, Callable[..., Read]] = {"sync": read_sync, "async": read_async,
                                           "raw": read_raw}
KINDS = ("reset", "reset_in_char", "reset_in_line", "half_close", "stall", "trickle", "delay")


def _fault(kind: str, after: int) -> Fault:
    # Resets in the body only: an upstream that breaks before its head is a 502 with no stream
    # (nothing to resume), a case of its own.
    return {
        "reset": Fault.reset(after=after, cut=Cut.IN_BODY),
        "reset_in_char": Fault.reset(after=after, cut=Cut.INSIDE_CHAR),
        "reset_in_line": Fault.reset(after=after, cut=Cut.INSIDE_LINE),
        "half_close": Fault.half_close(after=after, cut=Cut.INSIDE_LINE),
        "stall": Fault.stall(0.3, after=after),
        "trickle": Fault.trickle(400, seconds=0.0002, after=after),
        "delay": Fault.delay(0.01, after=after),
    }[kind]


@dataclass(frozen=True, slots=True)
class Case:
    dialect: str
    reader: str
    seed: int
    side: str  # upstream, client, both
    kind: str
    after: int

    def faults(self) -> tuple[list[Fault], list[Fault]]:
        """(upstream side, client side)."""
        fault = _fault(self.kind, self.after)
        return ([fault] if self.side in ("upstream", "both") else [],
                [fault] if self.side in ("client", "both") else [])


@dataclass(frozen=True, slots=True)
class Outcome:
    case: Case
    read: Read
    verdict: Verdict
    generations: int


def _cases() -> list[Case]:
    rng = random.Random(12_3)
    cases: list[Case] = []
    for dialect in DIALECTS:
        for reader in READERS:
            for _n in range(PROFILE.relay_streams):
                kind = KINDS[len(cases) % len(KINDS)]
                cases.append(Case(dialect, reader, seed=1000 + len(cases),
                                  side=rng.choice(("upstream", "client", "both")),
                                  kind=kind, after=rng.randrange(0, 2500)))
    return cases


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Outcome]]:
    store = tmp_path_factory.mktemp("relay") / "journal.db"
    results: list[Outcome] = []
    with serve_in_thread(create_app()) as mock:
        port = urlsplit(mock).port
        assert port is not None
        with FaultRelay(port, unit="exchange") as upstream, \
                running_proxy(upstream.url, store=f"sqlite:///{store}") as (proxy, _app):
            proxy_port = urlsplit(proxy).port
            assert proxy_port is not None
            with FaultRelay(proxy_port, unit="exchange") as client_side:
                for case in _cases():
                    results.append(_run(case, mock, proxy, upstream, client_side))
                faults = upstream.stats().faults, client_side.stats().faults
    tally = Tally("relay faults, both sides of the proxy", streams=len(results))
    tally.faults = sum(faults[0].values()) + sum(faults[1].values())
    for outcome in results:
        verdict = outcome.verdict
        tally.exact += verdict.exact
        tally.interrupted_with_prefix += verdict.interrupted_with_prefix
        tally.duplicated += verdict.duplicated
        tally.lost += verdict.lost
        tally.extra_generations += max(0, outcome.generations - 1)
        tally.status_mismatches += verdict.status_mismatch
    mismatches: dict[str, int] = {}
    for outcome in results:
        if outcome.verdict.status_mismatch:
            key = f"{outcome.read.status} where journal says {outcome.verdict.proxy_status}"
            mismatches[key] = mismatches.get(key, 0) + 1
    tally.notes = {"faults applied": {"upstream side": faults[0], "client side": faults[1]},
                   "status mismatches": mismatches}
    tally.write()
    yield results


def _run(case: Case, mock: str, proxy: str, upstream: FaultRelay,
         client_side: FaultRelay) -> Outcome:
    call = CALLS[case.dialect]
    assert httpx2.post(mock + "/_mock/reset", timeout=5).status_code == 200
    up_faults, client_faults = case.faults()
    upstream.queue(*up_faults)
    client_side.queue(*client_faults)
    scenario = f"seed={case.seed}; tokens={TOKENS}"
    read = READERS[case.reader](client_side.url, call, scenario)
    upstream.clear_queue()
    client_side.clear_queue()
    assert read.stream_id is not None, (case, read)
    status = settled_status(proxy, read.stream_id)
    generations = sum(mock_counts(mock).get("generations", {}).values())
    return Outcome(case, read, Verdict.of(read, status, reply_deltas(case.seed, TOKENS)),
                   generations)


def _failures(outcomes: list[Outcome], bad: Callable[[Outcome], bool]) -> list[str]:
    return [f"{o.case} -> {o.read.status} {o.read.error} streams={o.read.streams} "
            f"connections={o.read.connections} generations={o.generations} "
            f"{len(o.read.text)} chars | journal {o.verdict.proxy_status} "
            f"{len(o.verdict.proxy_text)} chars" for o in outcomes if bad(o)]


def test_the_journal_holds_whole_deltas_only(outcomes: list[Outcome]) -> None:
    assert _failures(outcomes, lambda o: not o.verdict.whole_deltas) == []
    assert {o.verdict.proxy_status for o in outcomes} <= {"completed", "interrupted"}


def test_every_reader_gets_exactly_the_journaled_text(outcomes: list[Outcome]) -> None:
    assert _failures(outcomes, lambda o: bool(o.verdict.duplicated or o.verdict.lost)) == []
    assert sum(o.verdict.exact or o.verdict.interrupted_with_prefix for o in outcomes) \
        == len(outcomes)


def test_every_generation_is_one_the_reader_reports(outcomes: list[Outcome]) -> None:
    assert _failures(outcomes, lambda o: o.generations != o.read.generations) == []
    assert _failures(outcomes, lambda o: o.case.reader == "raw" and o.generations != 1) == []
    # A second generation is one more proxy stream, never text shown twice.
    assert _failures(outcomes, lambda o: o.read.streams != o.read.generations) == []


def test_every_reader_reports_the_journaled_status(outcomes: list[Outcome]) -> None:
    assert _failures(outcomes, lambda o: o.verdict.status_mismatch) == []


def test_the_faults_really_happened(outcomes: list[Outcome]) -> None:
    interrupted = [o for o in outcomes if o.verdict.proxy_status == "interrupted"]
    resumed = [o for o in outcomes if o.read.connections > 1]
    assert interrupted, "no upstream fault ended a stream early"
    assert resumed, "no reader had to resume"
