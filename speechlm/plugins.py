"""Plug-ins: modules that extend speechlm when imported, found through the `speechlm.plugins` entry points.

This is the field's convention (pytest's `pytest11`, vLLM's `vllm.general_plugins`): a package names
a module in its metadata,

    [project.entry-points."speechlm.plugins"]
    demo = "speechlm.demo.plugin"

and that module registers what it brings when imported (shard source types:
`speechlm.shard.sources.register`). speechlm's own built-in demo corpus is such a plug-in, so the
core never imports it. `load()` imports every one, once per process; the source registry calls it
before it looks up a kind, so a recipe's `kind: synthetic` finds the demo's type wherever the
recipe is read (a shard worker too).
"""

from __future__ import annotations

from importlib.metadata import entry_points

GROUP = "speechlm.plugins"

_loaded: list[str] | None = None  # the entry points' names once load() has run


class PluginError(ImportError):
    """A plug-in named by an entry point could not be imported."""


def load() -> list[str]:
    """Import the module of every `speechlm.plugins` entry point (the first call does; later calls
    return at once) and return their names. A module that fails to import raises PluginError naming
    the entry point, its module and the cause; the next call tries again."""
    global _loaded
    if _loaded is not None:
        return list(_loaded)
    _loaded = []  # a plug-in that looks up a kind while it imports must not start a second load
    names, seen = [], set()
    try:
        for ep in sorted(entry_points(group=GROUP), key=lambda e: (e.name, e.value)):
            if (ep.name, ep.value) not in seen:  # the same package seen twice on the path
                _import(ep)
                seen.add((ep.name, ep.value))
                names.append(ep.name)
    except BaseException:
        _loaded = None
        raise
    _loaded = names
    return list(names)


def _import(ep) -> None:
    try:
        ep.load()  # imports the module (and, for `module:attr`, reads the attribute)
    except Exception as e:
        raise PluginError(
            f"speechlm plug-in {ep.name!r} (entry point {GROUP}: {ep.name} = {ep.value!r}) failed to import: "
            f"{type(e).__name__}: {e}"
        ) from e
