"""What the mock remembers between requests: counts, status-fault attempts, background responses.

Everything lives in one event loop (uvicorn's), so plain dictionaries need no lock.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .scenario import Scenario
from .wire import Plan, PlannedFrame

__all__ = ["MockState", "StoredResponse"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredResponse:
    """A background Responses generation, kept so that it can be streamed again."""

    plan: Plan
    scenario: Scenario
    frames: tuple[PlannedFrame, ...]


@dataclass(slots=True)
class MockState:
    generations: Counter[str] = field(default_factory=Counter)
    resumes: Counter[str] = field(default_factory=Counter)
    # (path, scenario string) -> requests seen, for status=... status_times=K
    status_attempts: Counter[tuple[str, str]] = field(default_factory=Counter)
    background: dict[str, StoredResponse] = field(default_factory=dict)

    def counts(self) -> dict[str, dict[str, int]]:
        return {"generations": dict(self.generations), "resumes": dict(self.resumes)}

    def reset(self) -> None:
        self.generations.clear()
        self.resumes.clear()
        self.status_attempts.clear()
        self.background.clear()
