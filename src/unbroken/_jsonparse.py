"""JSON payloads: orjson when installed (the ``speed`` extra), else the standard ``json``.

``loads`` is bound once at import, so the hot path pays no backend test per frame. Both backends
raise a ``ValueError`` subclass on malformed input (``orjson.JSONDecodeError`` and
``json.JSONDecodeError`` both derive from it). ``dumps_compact`` always uses the standard library:
its output (float formatting in particular) must not depend on which backend is installed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["BACKEND", "dumps_compact", "loads"]

_loads: Callable[[str | bytes], Any]
try:
    import orjson
except ImportError:
    BACKEND = "json"
    _loads = json.loads
else:
    BACKEND = "orjson"
    _loads = orjson.loads

loads = _loads
"""Parse one JSON value from ``str`` or ``bytes``; raises ``ValueError`` on bad input."""


def dumps_compact(value: Any) -> str:
    """Serialize with no spaces and non-ASCII kept as is (the same text under either backend)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
