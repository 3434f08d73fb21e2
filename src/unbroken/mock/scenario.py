"""The scenario a request asks for: ``Unbroken-Mock: key=value; key=value`` (or ``?mock=``).

Parsing is strict: an unknown key, a repeated key, a bad value or a key that needs another key
raises ``ScenarioError`` naming the key, and the app answers 400 with that message.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["FINISHES", "STATUSES", "Scenario", "ScenarioError", "parse_scenario"]

FINISHES = ("stop", "length", "content_filter", "tool_calls", "error")
STATUSES = (429, 500, 503)


class ScenarioError(ValueError):
    """A bad scenario string; ``key`` is the offending key (or the offending item)."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"bad scenario key {key!r}: {problem}")
        self.key = key
        self.problem = problem


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """Every key with its default; ``None`` means the fault is off."""

    seed: int = 0
    tokens: int = 40
    finish: str = "stop"
    drop_after: int | None = None
    drop_mid: bool = False
    stall_after: int | None = None
    stall_s: float = 60.0
    pings: bool = False
    ping_ms: int = 100
    delay_ms: int = 0
    split_utf8: bool = False
    error_at: int | None = None
    malformed_json_at: int | None = None
    invalid_utf8_at: int | None = None
    duplicate: int | None = None
    status: int | None = None
    status_times: int | None = None
    retry_after: float | None = None
    sse_ids: bool = False
    partial_args: bool = False


def _integer(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not text.isascii() or not text.lstrip("-").isdigit():
            raise ValueError(f"expected an integer, got {text!r}")
        value = int(text)
        if not low <= value <= high:
            raise ValueError(f"expected {low}..{high}, got {value}")
        return value

    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"expected a non-negative number of seconds, got {text!r}")
    return value


def _flag(text: str) -> bool:
    if text not in ("0", "1"):
        raise ValueError(f"expected 0 or 1, got {text!r}")
    return text == "1"


def _finish(text: str) -> str:
    if text not in FINISHES:
        raise ValueError(f"expected one of {'|'.join(FINISHES)}, got {text!r}")
    return text


def _status(text: str) -> int:
    if text not in {str(status) for status in STATUSES}:
        raise ValueError(f"expected one of {'|'.join(map(str, STATUSES))}, got {text!r}")
    return int(text)


_BIG = 10**9
PARSERS: dict[str, Callable[[str], Any]] = {
    "seed": _integer(-_BIG, _BIG),
    "tokens": _integer(1, 100_000),
    "finish": _finish,
    "drop_after": _integer(0, _BIG),
    "drop_mid": _flag,
    "stall_after": _integer(0, _BIG),
    "stall_s": _seconds,
    "pings": _flag,
    "ping_ms": _integer(1, 3_600_000),
    "delay_ms": _integer(0, 3_600_000),
    "split_utf8": _flag,
    "error_at": _integer(1, _BIG),
    "malformed_json_at": _integer(1, _BIG),
    "invalid_utf8_at": _integer(1, _BIG),
    "duplicate": _integer(1, _BIG),
    "status": _status,
    "status_times": _integer(1, _BIG),
    "retry_after": _seconds,
    "sse_ids": _flag,
    "partial_args": _flag,
}
# A key that only means something together with another one.
NEEDS = {
    "drop_mid": "drop_after",
    "stall_s": "stall_after",
    "ping_ms": "pings",
    "status_times": "status",
    "retry_after": "status",
    "partial_args": "finish",
}


def parse_scenario(text: str) -> Scenario:
    """Parse ``key=value; key=value``; an empty string is the default scenario."""
    values: dict[str, Any] = {}
    for item in text.split(";"):
        item = item.strip()
        if not item:
            continue
        key, equals, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        if not equals:
            raise ScenarioError(key, "expected key=value")
        parser = PARSERS.get(key)
        if parser is None:
            raise ScenarioError(key, f"unknown key (known: {', '.join(sorted(PARSERS))})")
        if key in values:
            raise ScenarioError(key, "given twice")
        try:
            values[key] = parser(raw)
        except ValueError as error:
            raise ScenarioError(key, str(error)) from None
    for key, needed in NEEDS.items():
        if key in values and needed not in values:
            raise ScenarioError(key, f"needs {needed}")
    return Scenario(**values)
