"""The torture suite runs only when asked: ``./scripts/torture --profile short|long``.

That script sets ``UNBROKEN_TORTURE`` to the profile; without it (``./scripts/test``, a plain
``pytest``) nothing here is collected, so the ordinary suite keeps its running time. Every test
here is marked ``torture``.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("UNBROKEN_TORTURE") not in ("short", "long"):
    collect_ignore_glob = ["test_*.py"]


# Per test, its module fixture's streams included (the suite's 120 s default is too short for
# a long profile's loops); still a bound.
TIMEOUT_S = {"short": 600, "long": 3600}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    profile = os.environ.get("UNBROKEN_TORTURE", "short")
    for item in items:
        if "tests/torture/" in item.nodeid:
            item.add_marker(pytest.mark.torture)
            item.add_marker(pytest.mark.timeout(TIMEOUT_S.get(profile, 600)))
