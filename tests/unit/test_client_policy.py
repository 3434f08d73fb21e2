"""Retry policy, server-given delays and the client's defaults (design.md "I/O layers")."""

from __future__ import annotations

import inspect
import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from unbroken.client import Deadlines, Retry, astream, stream
from unbroken.client.policy import is_retryable, retry_after_seconds, server_retry_delay
from unbroken.errors import (
    ConnectTimeout,
    ContentTypeError,
    DecodingError,
    FirstEventTimeout,
    IdleTimeout,
    PayloadError,
    ProviderError,
    StreamError,
    TotalTimeout,
    TransportError,
    UpstreamStatusError,
)
from unbroken.events import ErrorEvent


def test_retry_defaults_are_the_designs() -> None:
    assert Retry() == Retry(attempts=3, backoff=0.5, max_backoff=8.0)


@pytest.mark.parametrize("client", [stream, astream])
def test_stream_defaults_are_the_designs(client: object) -> None:
    params = inspect.signature(client).parameters  # type: ignore[arg-type]
    defaults = {name: p.default for name, p in params.items() if p.default is not p.empty}
    assert defaults["connect_timeout"] == 10.0
    assert defaults["first_event_timeout"] == 60.0
    assert defaults["idle_timeout"] == 30.0
    assert defaults["total_timeout"] is None
    assert defaults["resume"] == "auto"
    assert defaults["raise_on_error"] is True
    assert defaults["retry"] is None  # None means Retry()
    assert params["dialect"].kind is inspect.Parameter.KEYWORD_ONLY


def test_deadline_defaults_are_the_designs() -> None:
    assert Deadlines() == Deadlines(connect=10.0, first_event=60.0, idle=30.0, total=None)


@pytest.mark.parametrize(
    "options",
    [{"attempts": 0}, {"attempts": -1}, {"backoff": -0.1}, {"max_backoff": -1.0}],
)
def test_retry_rejects_nonsense(options: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="Retry"):
        Retry(**options)  # type: ignore[arg-type]


def test_backoff_doubles_with_full_jitter_on_its_upper_half() -> None:
    retry = Retry(attempts=9, backoff=0.5, max_backoff=8.0)
    draws = random.Random(7)
    expected = []
    for ceiling in (0.5, 1.0, 2.0, 4.0, 8.0, 8.0):  # capped at max_backoff from n = 5
        expected.append(ceiling / 2 + draws.random() * ceiling / 2)
    rng = random.Random(7)
    assert [retry.delay(n, rng=rng) for n in range(1, 7)] == expected


def test_backoff_stays_within_its_bounds() -> None:
    retry = Retry(backoff=1.0, max_backoff=3.0)
    rng = random.Random(1)
    for n in range(1, 40):
        ceiling = min(3.0, 2.0 ** (n - 1))
        assert ceiling / 2 <= retry.delay(n, rng=rng) <= ceiling


def test_zero_backoff_means_no_pause() -> None:
    assert Retry(backoff=0.0).delay(3, rng=random.Random(0)) == 0.0


def test_the_server_word_wins_over_backoff() -> None:
    retry = Retry(backoff=100.0)
    rng = random.Random(0)
    assert retry.delay(1, server_says=0.25, rng=rng) == 0.25
    assert retry.delay(5, server_says=0.0, rng=rng) == 0.0
    assert retry.delay(1, server_says=-3.0, rng=rng) == 0.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        ("", None),
        ("0", 0.0),
        ("3", 3.0),
        (" 120 ", 120.0),
        ("1.5", 1.5),
        ("-5", None),  # negative: unusable
        ("nan", None),  # would make time.sleep raise
        ("inf", None),
        ("soon", None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # a date in the past: now
        ("Wed, 21 Oct", None),
    ],
)
def test_retry_after_seconds(value: str | None, seconds: float | None) -> None:
    assert retry_after_seconds(value) == seconds


def test_retry_after_as_a_future_http_date() -> None:
    when = datetime.now(UTC) + timedelta(seconds=3600)
    seconds = retry_after_seconds(format_datetime(when, usegmt=True))
    assert seconds is not None
    # The date has whole seconds and some time passes while parsing: within two seconds.
    assert 3598.0 <= seconds <= 3600.0


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({}, None),
        ({"retry-after": "2"}, 2.0),
        ({"retry-after-ms": "150"}, 0.15),
        ({"retry-after": "1", "retry-after-ms": "50"}, 0.05),  # the precise one wins
        ({"retry-after": "4", "retry-after-ms": "nan"}, 4.0),  # an unusable one is ignored
        ({"retry-after": "4", "retry-after-ms": "-1"}, 4.0),
        ({"retry-after": "x", "retry-after-ms": "x"}, None),
    ],
)
def test_server_retry_delay(headers: dict[str, str], seconds: float | None) -> None:
    assert server_retry_delay(headers) == seconds


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (TransportError("cut"), True),
        (ConnectTimeout("slow", seconds=1.0), True),
        (FirstEventTimeout("slow", seconds=1.0), True),
        (IdleTimeout("slow", seconds=1.0), True),
        (TotalTimeout("over", seconds=1.0), False),
        (UpstreamStatusError(429), True),
        (UpstreamStatusError(500), True),
        (UpstreamStatusError(503), True),
        (UpstreamStatusError(400), False),
        (UpstreamStatusError(404), False),
        (ContentTypeError("text/html", "text/event-stream"), False),
        (PayloadError("bad"), False),
        (DecodingError("bad", offset=3), False),
        (ProviderError(ErrorEvent(seq=1, type="overloaded_error", message="", retryable=True)),
         True),
        (ProviderError(ErrorEvent(seq=1, type="invalid", message="", retryable=False)), False),
        (StreamError("other"), False),
    ],
)
def test_which_failures_are_worth_another_attempt(error: StreamError, retryable: bool) -> None:
    assert is_retryable(error) is retryable


def test_each_deadline_names_its_own_error() -> None:
    deadlines = Deadlines(first_event=2.0, idle=3.0, total=4.0)
    errors = [deadlines.error(which) for which in ("first_event", "idle", "total")]
    assert [(type(e), e.seconds) for e in errors] == [
        (FirstEventTimeout, 2.0), (IdleTimeout, 3.0), (TotalTimeout, 4.0)]
    with pytest.raises(ValueError, match="no total deadline"):
        Deadlines().error("total")
