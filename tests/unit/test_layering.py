"""The sans-I/O core imports and works with every I/O library made unimportable.

Two checks: a subprocess that sets the I/O modules to None in ``sys.modules`` (so importing one
raises) and then imports and uses the core; and a scan of the core's source (ast) for imports of
those modules, of a clock, or of unbroken's own I/O layers, including imports inside functions.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import unbroken

BLOCKED = [
    "anyio",
    "asyncio",
    "httpcore",
    "httpcore2",
    "httpx",
    "httpx2",
    "opentelemetry",
    "selectors",
    "socket",
    "threading",
]
CLOCKS = ["datetime", "time"]
IO_LAYERS = ["cli", "client", "mock", "proxy", "sdk", "server", "streams", "telemetry", "web"]
REQUIRED = ["unbroken.errors", "unbroken.events", "unbroken.finish", "unbroken.framing"]
OPTIONAL = [
    "unbroken.dialects",
    "unbroken._jsonparse",
    "unbroken.message",
    "unbroken.normalized_sse",
    "unbroken._receiver",
    "unbroken._tool_calls",
    "unbroken.resumption",
    "unbroken.trace",
    "unbroken._transitions",
]
PACKAGE = Path(unbroken.__file__).parent


def sans_io_modules() -> list[str]:
    present = [name for name in OPTIONAL if importlib.util.find_spec(name) is not None]
    for package in ("unbroken.framing", "unbroken.dialects"):
        if importlib.util.find_spec(package) is not None:
            folder = PACKAGE / package.rpartition(".")[2]
            paths = sorted(folder.glob("*.py"))
            present += [f"{package}.{path.stem}" for path in paths if path.stem != "__init__"]
    return REQUIRED + present


def test_the_required_core_modules_exist() -> None:
    assert all(importlib.util.find_spec(name) is not None for name in REQUIRED)
    assert "unbroken.framing._sse" in sans_io_modules()


SCRIPT = """
import importlib
import sys

for name in {blocked!r}:
    sys.modules[name] = None

import unbroken

for name in {modules!r}:
    importlib.import_module(name)

decoder = unbroken.SSEDecoder()
events = decoder.receive_data(b"\\xef\\xbb\\xbfid: 1\\r\\nevent: e\\r\\ndata: \\xe4\\xbd")
events += decoder.receive_data(b"\\xa0\\r\\n\\r\\ndata: [DONE]\\n\\n")
events += decoder.receive_eof()
got = [(e.event, e.data, e.id) for e in events]
assert got == [("e", "\\u4f60", "1"), ("message", "[DONE]", "1")], got

lines = unbroken.NDJSONDecoder().receive_data(b'{{"a": 1}}\\n')
assert [line.value for line in lines] == [{{"a": 1}}]
assert unbroken.Utf8Decoder().receive_data("\\u4f60".encode()) == "\\u4f60"

if hasattr(unbroken, "parse"):
    body = (
        b'data: {{"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{{"index":0,"delta":{{"content":"Hi"}},"finish_reason":"stop"}}]}}\\n\\n'
        b"data: [DONE]\\n\\n"
    )
    assert unbroken.parse([body], dialect="openai-chat").text == "Hi"

assert all(sys.modules[name] is None for name in {blocked!r})
print("sans-I/O ok:", len({modules!r}), "modules")
"""


def test_the_core_works_with_io_modules_unimportable() -> None:
    modules = sans_io_modules()
    script = SCRIPT.format(blocked=BLOCKED, modules=modules)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"sans-I/O ok: {len(modules)} modules\n"


def test_blocking_really_blocks() -> None:
    # The same mechanism makes an import of a blocked module fail, so the test above can fail.
    script = "import sys; sys.modules['socket'] = None; import socket"
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 1
    assert "ModuleNotFoundError: import of socket halted; None in sys.modules" in result.stderr


def core_files() -> list[Path]:
    top = [path for path in sorted(PACKAGE.glob("*.py")) if path.name != "__main__.py"]
    return top + sorted((PACKAGE / "framing").glob("*.py")) + sorted(
        (PACKAGE / "dialects").glob("*.py")
    )


def imported_names(source: str, package: str) -> list[str]:
    """Every module an import statement in ``source`` names, made absolute; at any depth.

    Imports under ``if TYPE_CHECKING:`` never run and are skipped.
    """
    names: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*parts, module] if module else parts)
            names.append(module)
            names.extend(f"{module}.{alias.name}" for alias in node.names)
        for inner in ast.iter_child_nodes(node):
            visit(inner)

    visit(ast.parse(source))
    return names


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id.lstrip("_") == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def violations(source: str, package: str) -> list[str]:
    forbidden = set(BLOCKED) | set(CLOCKS)
    layers = {f"unbroken.{layer}" for layer in IO_LAYERS}
    return [
        name
        for name in imported_names(source, package)
        if name.split(".")[0] in forbidden or ".".join(name.split(".")[:2]) in layers
    ]


@pytest.mark.parametrize("path", core_files(), ids=lambda path: str(path.relative_to(PACKAGE)))
def test_core_source_imports_no_io_and_no_clock(path: Path) -> None:
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    assert violations(path.read_text(encoding="utf-8"), package) == []


def test_the_source_scan_sees_relative_and_nested_imports() -> None:
    source = textwrap.dedent(
        """
        import re, socket
        from typing import TYPE_CHECKING as _TYPE_CHECKING
        from ..errors import StreamError
        if _TYPE_CHECKING:
            from ..client import Stream
        else:
            import threading
        def later():
            from ..client import stream
            from . import sse
            import time
        """
    )
    assert imported_names(source, "unbroken.framing") == [
        "re",
        "socket",
        "typing",
        "typing.TYPE_CHECKING",
        "unbroken.errors",
        "unbroken.errors.StreamError",
        "threading",
        "unbroken.client",
        "unbroken.client.stream",
        "unbroken.framing",
        "unbroken.framing.sse",
        "time",
    ]
    assert violations(source, "unbroken.framing") == [
        "socket",
        "threading",
        "unbroken.client",
        "unbroken.client.stream",
        "time",
    ]


# -- the I/O layers among themselves --------------------------------------------------------------

# The layers of unbroken, bottom to top (the diagram of the design): a layer imports only layers
# below it, and the core ("" here: every top-level module, framing/ and dialects/) imports none.
LAYER_ORDER = ["", "client", "mock", "streams", "server", "proxy", "cli"]
# Narrower than the order: the mock is a stand-in upstream and needs only the core; the SDK
# wrappers sit on the client.
ALLOWED = {
    "mock": {""},
    "sdk": {"", "client"},
}


def layer_of(module: str) -> str:
    """The layer a module of unbroken belongs to ("" for the core)."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in {*LAYER_ORDER, "sdk"}:
        return parts[1]
    return ""


def allowed_layers(layer: str) -> set[str]:
    if layer in ALLOWED:
        return ALLOWED[layer]
    below = set(LAYER_ORDER[: LAYER_ORDER.index(layer) + 1])
    # The SDK wrappers sit on the client, beside it: what may use the client may use them.
    return below | {"sdk"} if layer != "client" else below


def layer_violations(layer: str) -> list[str]:
    allowed = allowed_layers(layer) | {layer}
    found = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
        for name in imported_names(path.read_text(encoding="utf-8"), package):
            if name.split(".")[0] == "unbroken" and layer_of(name) not in allowed:
                found.append(f"{path.relative_to(PACKAGE)}: {name}")
    return found


@pytest.mark.parametrize("layer", [*LAYER_ORDER[1:], "sdk"])
def test_each_io_layer_imports_only_the_layers_below_it(layer: str) -> None:
    if not (PACKAGE / layer).is_dir():
        pytest.skip(f"unbroken/{layer}/ has not landed")
    assert layer_violations(layer) == []


def test_the_layer_rules() -> None:
    assert allowed_layers("client") == {"", "client"}
    assert allowed_layers("mock") == {""}  # never the client, the proxy or the engine
    assert allowed_layers("sdk") == {"", "client"}  # never the proxy or the mock
    assert "proxy" not in allowed_layers("server")
    assert "server" not in allowed_layers("streams")
    assert allowed_layers("proxy") == {"", "client", "sdk", "mock", "streams", "server", "proxy"}
    assert "sdk" in allowed_layers("server")  # a tracked provider stream as a source
    assert layer_of("unbroken.resumption") == layer_of("unbroken.framing._sse") == ""
    assert layer_of("unbroken.sdk.openai") == "sdk"
    assert layer_of("unbroken.streams.journal") == "streams"
