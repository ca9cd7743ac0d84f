"""The package's import graph (ast, no imports run): no circles between modules; folded to folders
(speechlm/<pkg>/ or a top-level module), with imports inside functions and modules loaded by name
counted, no circles either and every import runs down the layers of LAYERS (docs/design.md draws
them); every import of a speechlm module inside a function says why it is there (a heavy optional
dependency, say); no library module imports a command; the core never imports the demo
(speechlm/demo/ is a plug-in: speechlm.plugins)."""

from __future__ import annotations

import ast
from pathlib import Path

from paths import REPO

PACKAGE = REPO / "speechlm"


def _modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _targets(node, module: str, is_pkg: bool, modules) -> list[str]:
    """The speechlm modules an import statement names (`from a import b` is a.b when b is a module)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            here = module.split(".") if is_pkg else module.split(".")[:-1]
            here = here[: len(here) - (node.level - 1)]
            base = ".".join(here + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    out = []
    for n in names:
        while n not in modules and "." in n:
            n = n.rsplit(".", 1)[0]
        if n in modules:
            out.append(n)
    return out


def import_graph():
    """(module -> modules it imports at module level, [(module, target, line, source line)] inside functions)."""
    modules = _modules()
    edges: dict[str, set[str]] = {m: set() for m in modules}
    inner = []
    for m, path in modules.items():
        src = path.read_text()
        lines = src.splitlines()

        def visit(node, in_function: bool, m=m, path=path, lines=lines):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for t in _targets(child, m, path.name == "__init__.py", modules):
                        if in_function:
                            inner.append((m, t, child.lineno, lines[child.lineno - 1]))
                        else:
                            edges[m].add(t)
                nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                visit(child, nested, m, path, lines)

        visit(ast.parse(src), False)
    return edges, inner


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


# The layers, lowest first: a folder (or top-level module) imports only its own layer's and lower
# ones', and no two folders import each other, in any layer. `python -m speechlm.X` aliases (see
# ALIAS below) count as the commands they run.
LAYERS = [
    (
        "core",
        {"config", "audio_checks", "audio", "text", "tasks", "fsutil", "cache", "plugins", "quiet", "runs", "scoring"},
    ),
    ("core output", {"subtitles"}),
    ("shards", {"shard"}),
    ("reader", {"data"}),
    ("model", {"model"}),
    ("inference", {"inference"}),
    ("planner", {"plan"}),
    ("trainer", {"train"}),
    ("applications", {"serve", "runpod", "demo"}),
    ("commands", {"commands", "__main__"}),
]
BY_NAME = ("import_module", "__import__", "run_module")


def _folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def by_name(source: str) -> list[tuple[int, str]]:
    """(line, module) of each speechlm module `source` loads by a literal name (importlib, runpy)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in BY_NAME and str(node.args[0].value).startswith("speechlm."):
                out.append((node.lineno, node.args[0].value))
    return out


def folder_edges() -> dict[tuple[str, str], str]:
    """(folder, folder it imports) -> where one such import is: at module level, inside a function or by
    name. An alias module belongs to the commands' folder."""
    modules = _modules()
    edges, inner = import_graph()
    where = {}
    for m, ts in edges.items():
        for t in ts:
            where.setdefault((m, t), f"{m} imports {t}")
    for m, t, line, _ in inner:
        where.setdefault((m, t), f"{m}:{line} imports {t} inside a function")
    for m, path in modules.items():
        for line, t in by_name(path.read_text()):
            where.setdefault((m, t), f"{m}:{line} loads {t} by name")
    out = {}
    for (m, t), why in sorted(where.items()):
        a = "commands" if _alias_of(modules[m]) else _folder(m)
        b = _folder(t)
        if a != b:
            out.setdefault((a, b), why)
    return out


def test_by_name_finds_literal_loads_only():
    src = 'import importlib, runpy\nimportlib.import_module("speechlm.model.tiny")\n'
    src += 'runpy.run_module("speechlm.commands.x")\nimportlib.import_module(name)\n__import__("json")\n'
    assert by_name(src) == [(2, "speechlm.model.tiny"), (3, "speechlm.commands.x")]


def test_the_layers_place_every_folder_once():
    layered = [f for _, folders in LAYERS for f in folders]
    here = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    here |= (
        {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"} - {p.stem for p in PACKAGE.glob("*.py") if _alias_of(p)}
    )
    assert len(layered) == len(set(layered)), "a folder in two layers"
    assert set(layered) == here, f"not in a layer: {sorted(here - set(layered))}; gone: {sorted(set(layered) - here)}"


def test_no_import_circles_between_folders():
    """In-function imports and modules loaded by name count: deferring an import hides a circle."""
    graph: dict[str, set[str]] = {}
    for a, b in folder_edges():
        graph.setdefault(a, set()).add(b)
    found = circles(graph)
    assert not found, "folder circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_imports_run_down_the_layers():
    layer = {f: i for i, (_, folders) in enumerate(LAYERS) for f in folders}
    up = [
        f"{LAYERS[layer[a]][0]} -> {LAYERS[layer[b]][0]}: {why}"
        for (a, b), why in folder_edges().items()
        if layer.get(a, -1) < layer.get(b, len(LAYERS))
    ]
    assert not up, "imports that run up the layers (tests/test_imports.py LAYERS):\n" + "\n".join(up)


def test_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles_between_modules():
    """In-function imports count too: deferring an import hides a circle, it does not remove it."""
    edges, inner = import_graph()
    for m, t, _, _ in inner:
        edges[m].add(t)
    found = circles(edges)
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


# Modules that the data side of issue #23 rewrites on another branch at the same time (shard sources
# as plug-ins, eval through the training reader); that branch clears this list.
def test_in_function_imports_say_why():
    """A speechlm import inside a function carries its reason on the same line (a comment)."""
    _, inner = import_graph()
    bare = [f"{m}:{line} imports {t}" for m, t, line, text in inner if "#" not in text]
    assert not bare, "in-function imports without a reason:\n" + "\n".join(bare)


# The modelling layer: what an exported model folder (trust_remote_code) needs to run. Its files import
# only these packages, the standard library and each other (relative imports); speechlm.text is
# transformers-only (tokenizer and prompt helpers) and goes along; liger_kernel is the optional fused
# loss on CUDA (imported only when installed), packaging a dependency of transformers.
MODELLING_LAYER = [
    "model/speechlm.py",
    "model/projector.py",
    "model/loss.py",
    "model/generation.py",
    "model/align.py",
    "model/encoders/base.py",
    "model/encoders/granite.py",
    "model/encoders/whisper.py",
]
ALLOWED = {"torch", "numpy", "transformers", "peft", "safetensors", "liger_kernel", "packaging"}
ALLOWED |= {"speechlm.text", "speechlm.audio_checks"}  # numpy / transformers only; an export carries both


def test_the_modelling_layer_imports_nothing_of_loading_building_or_training():
    import sys

    bad = []
    for rel in MODELLING_LAYER:
        for node in ast.walk(ast.parse((PACKAGE / rel).read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                continue
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if node.__class__ is ast.ImportFrom and node.module == "speechlm":
                names = [f"speechlm.{a.name}" for a in node.names]
            for n in names:
                top = n.split(".")[0]
                if top in sys.stdlib_module_names or top == "__future__" or top in ALLOWED or n in ALLOWED:
                    continue
                bad.append(f"{rel} imports {n}")
    assert not bad, "\n".join(bad)


DEMO = "speechlm.demo"


def demo_imports(source: str, module: str, is_pkg: bool = False) -> list[tuple[int, str]]:
    """(line, name) of each import in `source` (module `module`) that names speechlm.demo or a module
    in it, in any form: `import speechlm.demo.x`, `from speechlm import demo`, `from speechlm.demo.x
    import y`, relative imports resolved; at module level or inside a function alike."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_pkg else module.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join(here + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for n in names:
            if n == DEMO or n.startswith(DEMO + "."):
                out.append((node.lineno, n))
                break
    return sorted(out)


def test_demo_import_finder_finds_every_form():
    src = (
        "import speechlm.demo.stages\n"
        "from speechlm import demo, wer\n"
        "from speechlm.demo.grammar import VOCABULARY\n"
        "from ..demo import corpus\n"
        "from speechlm import democracy, wer\n"  # a name that only starts like it
        "import speechlm.scoring.wer\n"
        "def f():\n"
        "    from speechlm.demo import plugin  # inside a function counts too\n"
        "    import speechlm.demonstration\n"
    )
    assert demo_imports(src, "speechlm.shard.schema") == [
        (1, "speechlm.demo.stages"),
        (2, "speechlm.demo"),
        (3, "speechlm.demo.grammar"),
        (4, "speechlm.demo"),
        (8, "speechlm.demo"),
    ]
    assert demo_imports("from . import grammar\n", "speechlm.demo", is_pkg=True) == [(1, "speechlm.demo")]
    assert demo_imports("from .sources import base\n", "speechlm.shard", is_pkg=True) == []


def test_the_core_never_imports_the_demo():
    """speechlm/demo/ plugs in through its entry point; no module outside it imports it but its command
    (speechlm/commands/demo.py: the commands sit above every layer, the demo too)."""
    bad = []
    for m, path in sorted(_modules().items()):
        if m == DEMO or m.startswith(DEMO + ".") or m == "speechlm.commands.demo":
            continue
        for line, name in demo_imports(path.read_text(), m, path.name == "__init__.py"):
            bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {name}")
    assert not bad, "the core imports the demo (register through speechlm.plugins instead):\n" + "\n".join(bad)


COMMANDS_PKG = "speechlm.commands"
# `python -m speechlm.X` where README and docs name it: an alias module that runs its command by name,
# exactly as `python -m` runs a module (speechlm/commands/X.py), and nothing else
ALIAS = 'runpy.run_module("speechlm.commands.{name}", run_name="__main__", alter_sys=True)'


def _alias_of(path: Path) -> str | None:
    """The command a module is an alias of (its body: a docstring, `import runpy`, ALIAS), else None."""
    body = ast.parse(path.read_text()).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if len(body) != 2 or ast.unparse(body[0]) != "import runpy":
        return None
    call = ast.unparse(body[1])
    name = call.removeprefix("runpy.run_module('speechlm.commands.").split("'", 1)[0]
    return name if call == ALIAS.format(name=name).replace('"', "'") else None


def test_every_subcommand_is_one_module_in_commands():
    from speechlm.commands import COMMANDS

    here = {p.stem for p in (PACKAGE / "commands").glob("*.py")} - {"__init__"}
    assert here == set(COMMANDS), f"speechlm/commands/ holds {sorted(here)}, the command knows {sorted(COMMANDS)}"
    for name in COMMANDS:
        tree = ast.parse((PACKAGE / "commands" / f"{name}.py").read_text())
        assert "main" in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}, name


def test_python_m_aliases_only_run_their_command():
    """Each `__main__.py` below the commands, and each module that imports runpy, is an alias: three lines."""
    from speechlm.commands import COMMANDS

    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "commands" or rel == Path("__main__.py"):
            continue
        if path.name == "__main__.py" or "runpy" in path.read_text():
            name = _alias_of(path)
            assert name in COMMANDS, f"speechlm/{rel}: not an alias of a command ({ALIAS})"
            found[str(rel)] = name
    assert found["eval.py"] == "eval" and found["serve/__main__.py"] == "serve"


def test_no_library_module_imports_a_command():
    """The trainer, the server and the library call speechlm.inference and the like, never a command:
    only the commands themselves (and `python -m speechlm`, the console script's twin) import one."""
    edges, inner = import_graph()
    for m, t, _, _ in inner:
        edges[m].add(t)
    found = sorted(
        f"{m} imports {t}"
        for m, ts in edges.items()
        for t in ts
        if (t == COMMANDS_PKG or t.startswith(COMMANDS_PKG + "."))
        and not (m == COMMANDS_PKG or m.startswith(COMMANDS_PKG + ".") or m == "speechlm.__main__")
    )
    assert not found, found
