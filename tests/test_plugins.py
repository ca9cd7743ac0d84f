"""Plug-ins (speechlm.plugins): the `speechlm.plugins` entry points are imported once, on the first
source lookup; the built-in demo is one, so importing the core loads none of it; a plug-in that fails
to import is an error naming its entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from paths import REPO
from speechlm import plugins


def fake_group(monkeypatch, *eps: tuple[str, str]) -> list[int]:
    """Make `speechlm.plugins` list these (name, module) entry points (real EntryPoint objects, loaded
    as any are) and forget what load() did; returns the list of calls, one item per lookup."""
    calls = []

    def entry_points(group):
        calls.append(group)
        return [EntryPoint(name=n, value=v, group=group) for n, v in eps]

    monkeypatch.setattr(plugins, "entry_points", entry_points)
    monkeypatch.setattr(plugins, "_loaded", None)
    return calls


def test_the_core_loads_the_demo_only_through_its_entry_point():
    probe = (
        "import json, sys\n"
        "from speechlm.shard import load_recipe, sources\n"
        "from speechlm import plugins\n"
        "before = sorted(m for m in sys.modules if m.startswith('speechlm.demo'))\n"
        "recipe, _ = load_recipe('synthetic')\n"
        "import speechlm.demo.plugin as p\n"
        "print(json.dumps({'before': before, 'kinds': sources.kinds(), 'loaded': plugins.load(),\n"
        "  'settings': type(recipe.sources[0].settings).__module__, 'file': p.__file__}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["before"] == []  # importing the shard core imports nothing of the demo
    assert {"synthetic", "timed"} <= set(out["kinds"]) and {"hf", "librispeech", "manifest"} <= set(out["kinds"])
    assert "demo" in out["loaded"] and out["settings"] == "speechlm.demo.grammar"
    assert Path(out["file"]).resolve().is_relative_to(REPO)  # this checkout's plug-in module


def test_a_plugin_that_fails_to_import_is_named(monkeypatch, tmp_path):
    (tmp_path / "speechlm_test_broken_plugin.py").write_text("raise RuntimeError('no espeak here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fake_group(monkeypatch, ("broken", "speechlm_test_broken_plugin"))
    message = (
        r"speechlm plug-in 'broken' \(entry point speechlm.plugins: broken = 'speechlm_test_broken_plugin'\) "
        r"failed to import: RuntimeError: no espeak here"
    )
    with pytest.raises(plugins.PluginError, match=message):
        plugins.load()
    with pytest.raises(plugins.PluginError, match=message):  # not marked loaded: the next call says it again
        plugins.load()
    fake_group(monkeypatch, ("missing", "speechlm_test_no_such_plugin"))
    with pytest.raises(plugins.PluginError, match=r"plug-in 'missing' .*ModuleNotFoundError"):
        plugins.load()


def test_plugins_load_once_and_may_look_up_kinds_while_they_import(monkeypatch, tmp_path):
    from speechlm.shard.sources import base

    monkeypatch.setattr(base, "_TYPES", dict(base._TYPES))  # the toy kind leaves with the test
    (tmp_path / "speechlm_test_toy_plugin.py").write_text(
        "import numpy as np\n"
        "from speechlm.shard import sources\n"
        "class Hum(sources.SourceType):\n"
        "    kind = 'test_hum'\n"
        "sources.register(Hum())\n"
        "KINDS = sources.kinds()  # a lookup while plug-ins load: no second load, no recursion\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    calls = fake_group(monkeypatch, ("toy", "speechlm_test_toy_plugin"), ("toy", "speechlm_test_toy_plugin"))
    assert plugins.load() == ["toy"]  # the same entry point seen twice (a package on the path twice): once
    assert plugins.load() == ["toy"]
    assert len(calls) == 1  # the entry points are read once per process

    from speechlm.shard import sources

    assert sources.source_type("test_hum").kind == "test_hum"
    assert "test_hum" in sys.modules["speechlm_test_toy_plugin"].KINDS
