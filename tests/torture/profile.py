"""How much each torture test does: ``short`` (CI, a few minutes in all) or ``long`` (on demand).

The profile comes from ``UNBROKEN_TORTURE`` (set by ``./scripts/torture``). Every figure is a
bound: a count of streams, rounds or examples, or seconds a loop may run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["PROFILE", "Profile"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    name: str
    relay_streams: int  # per dialect, each with a fault on one side or both, per reader
    kill_rounds: int  # SIGKILL-and-restart rounds on SQLite
    kill_streams: int  # concurrent streams per round
    redis_rounds: int  # one of two replicas killed, per round
    fuzz_examples: int  # hypothesis examples per decoder or dialect
    hostile_mib: int  # MiB of hostile input per memory-bound check
    soak_seconds: float  # steady load
    soak_concurrency: int


_PROFILES = {
    "short": Profile(name="short", relay_streams=3, kill_rounds=1, kill_streams=20,
                     redis_rounds=1, fuzz_examples=100, hostile_mib=2, soak_seconds=20.0,
                     soak_concurrency=4),
    "long": Profile(name="long", relay_streams=14, kill_rounds=5, kill_streams=30,
                    redis_rounds=3, fuzz_examples=1000, hostile_mib=16, soak_seconds=180.0,
                    soak_concurrency=8),
}

PROFILE = _PROFILES[os.environ.get("UNBROKEN_TORTURE", "short")]
