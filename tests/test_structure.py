"""The package's shape (ast, no imports run): no function in speechlm/ is over MAX_LINES lines, and
tests/ mirrors speechlm/.

A function counts from its `def` line (decorators left out) to its last line; a nested function counts
within its parent and on its own. A long one is split by what its parts do (issue 30).

The mirror (tests/conftest.py's docstring): tests/<pkg>/ for speechlm/<pkg>, a test file directly
in tests/ for a top-level module (tests/test_text.py: speechlm/text.py) or the whole package, one
basename per test file across the folders, and no __init__.py in a test folder."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

from paths import REPO, TESTS

PACKAGE = REPO / "speechlm"
MAX_LINES = 50
# test files directly in tests/ that test no one top-level module: the package as a whole
WHOLE_PACKAGE = {"test_imports.py", "test_structure.py", "test_readme_own_data.py"}
# test folders that mirror something other than a speechlm package or module
OTHER_MIRRORS = {
    "launch": "the launcher scripts of launch/ (and slurm/), which the tests run as a user does",
    "reliability": "the injected faults of docs/reliability.md, across the packages",
    "bench": "the benchmark scripts of bench/ (their pure functions; the measurements are run, not tested)",
    "vllm_plugin": "the vLLM plugin of vllm_plugin/ (its own package and environment, .venv-vllm)",
}


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


def test_no_function_is_over_50_lines():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for name, line, n in function_lengths(path.read_text()):
            if n > MAX_LINES:
                long.append(f"{_module(path)}:{name} ({n} lines, from line {line})")
    why = f"{len(long)} functions over {MAX_LINES} lines (split each by what its parts do):\n"
    assert not long, why + "\n".join(long)


def _test_folders() -> set[Path]:
    return {p.parent for p in TESTS.rglob("test_*.py")} - {TESTS}


def test_a_test_file_directly_in_tests_tests_a_top_level_module():
    stray = sorted(
        p.name
        for p in TESTS.glob("test_*.py")
        if p.name not in WHOLE_PACKAGE and not (PACKAGE / f"{p.stem.removeprefix('test_')}.py").is_file()
    )
    assert not stray, (
        f"not the tests of a top-level speechlm module: move each into tests/<pkg>/ for the package it tests: {stray}"
    )


def test_each_test_folder_mirrors_a_package_or_module():
    names = sorted({folder.relative_to(TESTS).parts[0] for folder in _test_folders()})
    orphans = [
        n for n in names if not ((PACKAGE / n).is_dir() or (PACKAGE / f"{n}.py").is_file() or n in OTHER_MIRRORS)
    ]
    assert not orphans, f"tests/<name>/ without a speechlm/<name> package or module to mirror: {orphans}"


def test_test_modules_import_by_unique_basenames():
    """Without __init__.py pytest imports each test file and each helper beside one under its basename
    (tests/conftest.py): two with one name would be one module."""
    packaged = [f.relative_to(TESTS) for f in _test_folders() if (f / "__init__.py").exists()]
    assert not packaged, f"__init__.py in test folders (none has one, see tests/conftest.py): {packaged}"
    modules = [
        p
        for p in TESTS.rglob("*.py")
        if p.name != "conftest.py" and not (p.parent / "__init__.py").exists() and p.parent.name != "assets"
    ]
    twice = {n: c for n, c in Counter(p.name for p in modules).items() if c > 1}
    assert not twice, f"module basenames used more than once under tests/: {sorted(twice)}"


# module-level names that recur by design: each module of a kind defines its own (a command's help, a
# family file's protocol, a builder's id prefix and version), or two unrelated things share a plain word
PER_MODULE = {
    "EXAMPLES": "each command's own help examples (speechlm/commands/)",
    "EXPORT": "each encoder family file's names an export carries (speechlm.model.encoders)",
    "FAMILY": "each encoder family file's class (speechlm.model.encoders)",
    "PREFIX": "each base builder's id prefix (tiny/, offline/: speechlm.model.ids)",
    "VERSION": "each base builder's cache version (speechlm.model.tiny, speechlm.model.pretrained)",
    "ENV": "plan.auto's device-memory variable; quiet's verbosity variable",
    "FLAG": "inference.bases' --base; quiet's --verbose",
    "FORMAT": "the model folder's format version; the shard manifest's format name",
    "MAX_SECONDS": "inference's longest file (4 h); the server's default request limit (1 h)",
    "NAMES": "the demo grammar's names; the tiny twins' names",
    "PARTS": "the demo corpus's test parts; a model's base parts (encoder, decoder)",
    "REMOTE_DIR": "the folder's hand-written remote code; the pod's checkout path",
    "SHAPES": "the loaders' shapes-only mode; init_from's shape settings",
}
CONSTANT = re.compile(r"^[A-Z][A-Z0-9_]*$")  # public: a private table (_DTYPES of a file format) is its own


def module_constants(source: str) -> list[tuple[str, int]]:
    """(name, line) of every module-level UPPER_CASE binding in `source`."""
    out = []
    for node in ast.parse(source).body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign) and node.value
            else []
        )
        out += [(t.id, node.lineno) for t in targets if isinstance(t, ast.Name) and CONSTANT.match(t.id)]
    return out


def test_the_constant_finder_reads_module_level_bindings_only():
    src = "A = 1\nB: int = 2\nlower = 3\ndef f():\n    C = 4\nclass K:\n    D = 5\n_E = 6\n"
    assert module_constants(src) == [("A", 1), ("B", 2)]


def test_each_constant_is_defined_once():
    """A constant has one home that everyone imports (DTYPES, SAMPLE_RATE, COSINE_SCALE were once
    defined two and three times over, and kept equal by hand): a module-level name bound in two modules
    is a repeat, unless PER_MODULE says why; and the sample rate appears as a number only at its home."""
    homes: dict[str, list[str]] = {}
    rate = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        for name, _ in module_constants(source):
            homes.setdefault(name, []).append(_module(path))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.value == 16000:
                rate.append(f"{_module(path)}:{node.lineno}")
    twice = {n: m for n, m in homes.items() if len(m) > 1 and n not in PER_MODULE}
    assert not twice, f"constants defined in more than one module (import them from one home): {twice}"
    assert rate == ["speechlm.audio_checks:" + str(_rate_line())], f"16000 outside speechlm.audio_checks: {rate}"


def _rate_line() -> int:
    return dict(module_constants((PACKAGE / "audio_checks.py").read_text()))["SAMPLE_RATE"]


DESIGN = REPO / "docs" / "design.md"
NOT_CODE = {"recipes", "assets", "configs", "__pycache__"}  # data folders of the package


def design_layout(text: str) -> set[str]:
    """The paths the layout block of docs/design.md's map lists (the first block after "**Layout**"):
    the first word of each line that starts with speechlm/, and the alias line's comma list."""
    block = text.split("**Layout**", 1)[1].split("```", 2)[1]
    out = set()
    for line in block.splitlines():
        if not line.startswith("speechlm/"):
            continue
        head = line.split("  ", 1)[0]
        first, *more = [w.strip() for w in head.split(",")]
        out.add(first)
        folder = first.rsplit("/", 1)[0] + "/"
        out |= {folder + w for w in more if w}
    return out


def tree_layout() -> set[str]:
    """speechlm/'s top-level modules and every folder of Python files in it, at any depth."""
    out = {f"speechlm/{p.name}" for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    for d in PACKAGE.rglob("*"):
        if d.is_dir() and d.name not in NOT_CODE and any(d.glob("*.py")):
            out.add(str(d.relative_to(PACKAGE.parent)) + "/")
    return out


def test_the_design_map_lists_the_tree():
    text = "**Layout**\n```\nspeechlm/a.py, b.py   two modules\n  more words\nspeechlm/c/   a folder\n```\n"
    assert design_layout(text) == {"speechlm/a.py", "speechlm/b.py", "speechlm/c/"}
    listed, tree = design_layout(DESIGN.read_text()), tree_layout()
    assert listed == tree, (
        f"docs/design.md's layout and the tree differ: not listed {sorted(tree - listed)}; "
        f"listed but not there {sorted(listed - tree)}"
    )
