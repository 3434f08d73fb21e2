"""JSON payloads: orjson when installed (the ``speed`` extra), else the standard ``json``."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["BACKEND", "dumps_compact", "loads"]

try:
    import orjson
except ImportError:  # pragma: no cover - depends on the environment
    orjson = None  # type: ignore[assignment]

BACKEND = "orjson" if orjson is not None else "json"


def loads(data: str | bytes) -> Any:
    """Parse one JSON value; raises ``ValueError`` (``JSONDecodeError``) on bad input."""
    if orjson is not None:
        return orjson.loads(data)
    return json.loads(data)


def dumps_compact(value: Any) -> str:
    """Serialize with no spaces and non-ASCII kept as is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
