"""The package's shape (ast, no imports run): no function in speechlm/ is over MAX_LINES lines.

A function counts from its `def` line (decorators left out) to its last line; a nested function counts
within its parent and on its own. A long one is split by what its parts do (issue 30)."""

from __future__ import annotations

import ast
from pathlib import Path

from paths import REPO

PACKAGE = REPO / "speechlm"
MAX_LINES = 60


def function_lengths(source: str) -> list[tuple[str, int, int]]:
    """(qualified name, first line, length in lines) of every function in `source`, methods as
    Class.method and nested functions as outer.inner."""
    out = []

    def visit(node, prefix: str):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                out.append((name, child.lineno, child.end_lineno - child.lineno + 1))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_measure_counts_from_def_and_nested_functions_on_their_own():
    src = (
        "import functools\n"
        "@functools.lru_cache\n"  # a decorator is not counted
        "def outer():\n"
        "    x = 1\n"
        "\n"
        "    def inner():\n"
        "        return x\n"
        "\n"
        "    return inner\n"
        "class C:\n"
        "    @property\n"
        "    def m(self):\n"
        "        return 1\n"
        "    async def a(self):\n"
        "        pass\n"
    )
    assert function_lengths(src) == [("outer", 3, 7), ("outer.inner", 6, 2), ("C.m", 12, 2), ("C.a", 14, 2)]


def test_no_function_is_over_60_lines():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for name, line, n in function_lengths(path.read_text()):
            if n > MAX_LINES:
                long.append(f"{_module(path)}:{name} ({n} lines, from line {line})")
    why = f"{len(long)} functions over {MAX_LINES} lines (split each by what its parts do):\n"
    assert not long, why + "\n".join(long)
