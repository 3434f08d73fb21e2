"""``resumption``: the event id, the proxy's mark, and the client's decision table."""

from __future__ import annotations

import pytest

from unbroken.dialects import DIALECT_NAMES, get_dialect
from unbroken.errors import PayloadError, ProxyInterrupted
from unbroken.resumption import (
    DECISIONS,
    Decision,
    Failure,
    ProxyMark,
    ResumeTarget,
    Shown,
    decide,
    event_id,
    parse_event_id,
    proxy_end_error,
    proxy_error,
    proxy_mark,
)


def test_event_id_builds_and_parses_back() -> None:
    assert event_id("ub_0123", 7) == "ub_0123:7"
    assert parse_event_id(event_id("ub_0123", 7)) == ("ub_0123", 7)
    assert parse_event_id(" ub_x:12 \t") == ("ub_x", 12)  # a header value's whitespace
    assert parse_event_id("a:b:3") == ("a:b", 3)  # the seq follows the last colon
    assert parse_event_id("ub_x:" + "9" * 18) == ("ub_x", 10**18 - 1)


@pytest.mark.parametrize("value", [
    None, "", "abc", "12", ":5", "ub_x:", "ub_x:-1", "ub_x:+1", "ub_x:1.0", "ub_x:١٢",
    "ub_x:" + "9" * 19, "ub_x:1 2",
])
def test_event_ids_that_are_not_ours(value: str | None) -> None:
    assert parse_event_id(value) is None


def test_a_mark_reads_back_only_as_written() -> None:
    mark = ProxyMark(code="upstream_interrupted", status="interrupted", resumable=False)
    assert mark.fields() == {"code": "upstream_interrupted", "status": "interrupted",
                             "resumable": "false"}
    assert ProxyMark.from_fields({**mark.fields(), "message": "m"}) == ProxyMark(
        code="upstream_interrupted", status="interrupted", resumable=False, message="m")
    for bad in ({**mark.fields(), "resumable": "yes"}, {"code": "c", "status": "s"},
                {**mark.fields(), "code": 1}, ["code"], None):
        assert ProxyMark.from_fields(bad) is None


@pytest.mark.parametrize("dialect", DIALECT_NAMES)
@pytest.mark.parametrize("resumable", [True, False])
def test_every_dialect_carries_the_mark_and_reads_it_back(dialect: str, resumable: bool) -> None:
    mark = ProxyMark(code="stream_incomplete", status="streaming", resumable=resumable,
                     message="unbroken proxy: a [bracketed] message; with=signs")
    _event, payload = proxy_error(get_dialect(dialect), mark, 4)
    assert proxy_mark(get_dialect(dialect), payload) == mark


@pytest.mark.parametrize("dialect", DIALECT_NAMES)
def test_payloads_without_the_mark_are_not_the_proxys(dialect: str) -> None:
    reader = get_dialect(dialect)
    payloads: list[object] = [
        {"error": "unbroken proxy: x"}, {"error": {"message": "unbroken proxy"}},
        {"type": "error", "error": {"type": "api_error", "message": "x"}},
        {"error": {"code": 500, "details": [{"domain": "googleapis.com",
                                             "metadata": {"code": "c"}}]}},
        {"choices": []}, [], "x", None,
    ]
    for payload in payloads:
        assert proxy_mark(reader, payload) is None


def test_the_end_a_mark_gives_a_message() -> None:
    interrupted = proxy_end_error(ProxyMark(code="c", status="interrupted", resumable=False,
                                            message="m"))
    assert isinstance(interrupted, ProxyInterrupted)
    assert (interrupted.code, interrupted.status, str(interrupted)) == ("c", "interrupted", "m")
    failed = proxy_end_error(ProxyMark(code="c", status="failed", resumable=False, message="m"))
    assert isinstance(failed, PayloadError) and str(failed) == "m"
    assert proxy_end_error(ProxyMark(code="c", status="cancelled", resumable=False)) is None


def test_the_table_decides_every_combination() -> None:
    assert len(DECISIONS) == len(Failure) * len(Shown) * len(ResumeTarget)


@pytest.mark.parametrize(("failure", "shown", "target", "decision"), [
    # A resume continues the same generation: it wins whenever there is a target...
    (Failure.BROKEN, Shown.NOTHING, ResumeTarget.SSE, Decision.RESUME),
    (Failure.BROKEN, Shown.CONTENT, ResumeTarget.SSE, Decision.RESUME),
    (Failure.BROKEN, Shown.CONTENT, ResumeTarget.BACKGROUND, Decision.RESUME),
    # ...else a fresh attempt, counted as a second generation once the provider answered...
    (Failure.BROKEN, Shown.NOTHING, ResumeTarget.NONE, Decision.RETRY),
    (Failure.BROKEN, Shown.ANSWERED, ResumeTarget.NONE, Decision.REGENERATE),
    # ...and never after content.
    (Failure.BROKEN, Shown.CONTENT, ResumeTarget.NONE, Decision.GIVE_UP),
    # A provider error is not resumed: reading on gives the same error.
    (Failure.PROVIDER_ERROR, Shown.NOTHING, ResumeTarget.SSE, Decision.RETRY),
    (Failure.PROVIDER_ERROR, Shown.ANSWERED, ResumeTarget.SSE, Decision.REGENERATE),
    (Failure.PROVIDER_ERROR, Shown.CONTENT, ResumeTarget.SSE, Decision.GIVE_UP),
    # A stream the proxy ended has nothing more to read; its upstream had accepted it.
    (Failure.PROXY_ENDED, Shown.NOTHING, ResumeTarget.SSE, Decision.REGENERATE),
    (Failure.PROXY_ENDED, Shown.ANSWERED, ResumeTarget.SSE, Decision.REGENERATE),
    (Failure.PROXY_ENDED, Shown.CONTENT, ResumeTarget.SSE, Decision.GIVE_UP),
])
def test_decisions(failure: Failure, shown: Shown, target: ResumeTarget,
                   decision: Decision) -> None:
    assert decide(failure, shown, target) is decision
