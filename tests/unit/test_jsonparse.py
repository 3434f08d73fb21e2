"""JSON payload parsing under both backends (orjson when installed, else the standard json)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from unbroken import _jsonparse as jsonparse


def test_orjson_is_used_when_installed() -> None:
    pytest.importorskip("orjson")
    assert jsonparse.BACKEND == "orjson"


@pytest.mark.parametrize("data", ['{"a": [1, "é", null]}', b'{"a": [1, "\xc3\xa9", null]}'])
def test_loads_str_and_bytes(data: str | bytes) -> None:
    assert jsonparse.loads(data) == {"a": [1, "é", None]}


@pytest.mark.parametrize("data", ['{"a": ', "", "[1,]", '{"a": "\\'])
def test_malformed_input_raises_value_error(data: str) -> None:
    with pytest.raises(ValueError):
        jsonparse.loads(data)


def test_dumps_compact() -> None:
    assert jsonparse.dumps_compact({"city": "Zürich", "n": [1, 2.5e-07]}) == (
        '{"city":"Zürich","n":[1,2.5e-07]}'
    )


# The same checks in a fresh interpreter where orjson cannot be imported.
STANDARD_JSON_RUN = """
import json, sys
sys.modules["orjson"] = None
from unbroken import _jsonparse as jsonparse
from unbroken.dialects import get_dialect
from unbroken.errors import PayloadError
from unbroken.framing import ServerSentEvent
out = {"backend": jsonparse.BACKEND, "value": jsonparse.loads(b'{"a": [1, "\\\\u00e9"]}')}
try:
    jsonparse.loads('{"a": ')
except ValueError as exc:
    out["error"] = type(exc).__name__
try:
    get_dialect("anthropic").load(ServerSentEvent(event="ping", data='{"type": '))
except PayloadError as exc:
    out["payload_error"] = str(exc).split(":")[0:2]
out["dumps"] = jsonparse.dumps_compact({"city": "Zürich", "n": [1, 2.5e-07]})
print(json.dumps(out))
"""


def test_standard_json_backend() -> None:
    result = subprocess.run(
        [sys.executable, "-c", STANDARD_JSON_RUN], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "backend": "json",
        "value": {"a": [1, "é"]},
        "error": "JSONDecodeError",
        "payload_error": ["anthropic", " malformed JSON in event data"],
        "dumps": '{"city":"Zürich","n":[1,2.5e-07]}',
    }
