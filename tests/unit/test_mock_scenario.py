"""Parsing the mock's scenario string."""

from __future__ import annotations

import pytest

from unbroken.mock.scenario import PARSERS, Scenario, ScenarioError, parse_scenario


def test_empty_is_the_default_scenario() -> None:
    assert parse_scenario("") == Scenario()
    assert parse_scenario(" ; ;") == Scenario()
    assert Scenario().seed == 0
    assert Scenario().tokens == 40
    assert Scenario().finish == "stop"


def test_every_field_has_a_parser() -> None:
    assert set(PARSERS) == set(Scenario.__dataclass_fields__)


def test_all_keys() -> None:
    text = (
        "seed=7; tokens=3; finish=length; drop_after=2; drop_mid=1; stall_after=1; stall_s=0.5;"
        " pings=1; ping_ms=20; delay_ms=5; split_utf8=1; error_at=3; malformed_json_at=2;"
        " invalid_utf8_at=2; duplicate=1; status=429; status_times=2; retry_after=0.25; sse_ids=1"
    )
    assert parse_scenario(text) == Scenario(
        seed=7, tokens=3, finish="length", drop_after=2, drop_mid=True, stall_after=1,
        stall_s=0.5, pings=True, ping_ms=20, delay_ms=5, split_utf8=True, error_at=3,
        malformed_json_at=2, invalid_utf8_at=2, duplicate=1, status=429, status_times=2,
        retry_after=0.25, sse_ids=True,
    )


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("bogus=1", "bogus", "unknown key"),
        ("tokens", "tokens", "expected key=value"),
        ("tokens=0", "tokens", "expected 1..100000, got 0"),
        ("tokens=x", "tokens", "expected an integer"),
        ("tokens=\uff11", "tokens", "expected an integer"),
        ("seed=1; seed=2", "seed", "given twice"),
        ("finish=done", "finish", "expected one of stop|length|content_filter|tool_calls|error"),
        ("status=404", "status", "expected one of 429|500|503"),
        ("drop_mid=2", "drop_mid", "expected 0 or 1"),
        ("drop_mid=1", "drop_mid", "needs drop_after"),
        ("stall_s=1", "stall_s", "needs stall_after"),
        ("ping_ms=5", "ping_ms", "needs pings"),
        ("status_times=1", "status_times", "needs status"),
        ("status=429; retry_after=-1", "retry_after", "non-negative"),
        ("stall_after=1; stall_s=nan", "stall_s", "non-negative"),
        ("error_at=0", "error_at", "expected 1.."),
    ],
)
def test_bad_scenarios_name_the_key(text: str, key: str, problem: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text)
    assert caught.value.key == key
    assert problem in caught.value.problem
    assert str(caught.value).startswith(f"bad scenario key {key!r}: ")
