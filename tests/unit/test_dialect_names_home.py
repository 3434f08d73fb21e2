"""A dialect's name is written in its dialect module only: every other module reaches a provider
through the registry (``unbroken.dialects``) or the dialect's class, never by comparing or
passing its name as a literal (design.md: a provider's knowledge has one home).

The scan reads every string constant of the package's source (ast), so a name inside a longer
text (a docstring's example) is not one; a literal equal to a registered name is.
"""

from __future__ import annotations

import ast
from pathlib import Path

import unbroken
from unbroken.dialects import DIALECT_NAMES, dialect_class

PACKAGE = Path(unbroken.__file__).parent
HOME = PACKAGE / "dialects"


def name_literals(source: str) -> list[tuple[int, str]]:
    """(line, name) for every string constant that is exactly a registered dialect name."""
    names = set(DIALECT_NAMES)
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
    ]


def test_no_dialect_name_is_written_outside_its_dialect_module() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{line}: {name!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if HOME not in path.parents
        for line, name in name_literals(path.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_the_scan_sees_a_comparison_an_argument_and_a_default() -> None:
    source = (
        'def f(d="ollama"):\n'
        '    """Not this one: dialect="gemini" in a sentence."""\n'
        '    if d == "openai-chat":\n'
        '        return g(name="anthropic")\n'
    )
    assert name_literals(source) == [(1, "ollama"), (3, "openai-chat"), (4, "anthropic")]


def test_every_name_is_written_in_its_own_module_only() -> None:
    # the registry, its detection and the other dialects reach a name through the class
    homes: dict[str, set[str]] = {name: set() for name in DIALECT_NAMES}
    for path in HOME.glob("*.py"):
        for _, name in name_literals(path.read_text(encoding="utf-8")):
            homes[name].add(f"unbroken.dialects.{path.stem}")
    assert homes == {name: {dialect_class(name).__module__} for name in DIALECT_NAMES}
