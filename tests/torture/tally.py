"""One row of RELIABILITY.md's table per torture test, appended to a JSON Lines file.

``./scripts/torture`` sets ``UNBROKEN_TORTURE_RESULTS`` to that file and prints the table from
it at the end (``python -m tests.torture.report FILE``). Without the variable nothing is written.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["COLUMNS", "Tally"]

COLUMNS = ("streams", "faults", "kills", "inputs", "exact", "interrupted_with_prefix",
           "duplicated", "lost", "extra_generations", "status_mismatches")


@dataclass(slots=True)
class Tally:
    """Counts of one test; ``notes`` holds anything else worth a line (figures, samples)."""

    test: str
    streams: int = 0
    faults: int = 0
    kills: int = 0
    inputs: int = 0
    exact: int = 0
    interrupted_with_prefix: int = 0
    duplicated: int = 0  # characters (or frames, for raw readers) seen twice
    lost: int = 0  # characters (or frames) journaled but never seen
    extra_generations: int = 0
    status_mismatches: int = 0
    notes: dict[str, Any] = field(default_factory=dict)

    def write(self) -> None:
        path = os.environ.get("UNBROKEN_TORTURE_RESULTS")
        if not path:
            return
        row = asdict(self) | {"profile": os.environ.get("UNBROKEN_TORTURE", "")}
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
