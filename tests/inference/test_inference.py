"""speechlm.inference as one package: `-m MODEL` found as resuming finds a run's checkpoint, the model
stack loaded only once a name that needs it is used, and the trainer importing no CLI module."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from paths import REPO
from speechlm import inference
from speechlm.config import ConfigError


def _model_folder(p: Path) -> Path:
    p.mkdir(parents=True)
    (p / "config.json").write_text(json.dumps({"model_type": "speechlm"}))  # what is_model_folder reads
    return p


def _checkpoint(run: Path, step: int, complete: bool = True) -> Path:
    d = run / "checkpoints" / f"step-{step}"
    _model_folder(d / "model")
    if complete:
        (d / "trainer_state.json").write_text("{}")
    return d


def test_model_dir_is_a_folder_a_checkpoint_or_a_runs_latest_complete_checkpoint(tmp_path):
    from speechlm.train.checkpoint import CheckpointManager

    folder = _model_folder(tmp_path / "export")
    assert inference.resolve_model_dir(folder) == folder
    run = tmp_path / "run"
    step2 = _checkpoint(run, 2)
    assert inference.resolve_model_dir(step2) == step2 / "model"
    (run / "checkpoints" / "latest").write_text("step-2\n")
    for given in (run, run / "checkpoints"):  # a run dir, or its checkpoints dir
        assert inference.resolve_model_dir(given) == step2 / "model"
    # the pointer names a checkpoint that never completed: not loaded, as resuming would not take it
    _checkpoint(run, 4, complete=False)
    (run / "checkpoints" / "latest").write_text("step-4\n")
    with pytest.raises(ConfigError, match="is not a speechlm model folder"):
        inference.resolve_model_dir(run)
    with pytest.raises(ConfigError, match="training.resume_from_checkpoint: no complete checkpoint"):
        CheckpointManager(run).resolve(str(run))
    with pytest.raises(ConfigError, match="no such folder"):
        inference.local_model(str(tmp_path / "missing"))


def test_the_model_stack_loads_on_first_use_of_a_name_that_needs_it():
    code = (
        "import sys\n"
        "import speechlm.commands.transcribe, speechlm.serve.engine\n"  # the CLIs' and the server's imports
        "from speechlm import inference\n"
        "light = 'torch' not in sys.modules\n"
        "inference.evaluate\n"
        "print(light, 'torch' in sys.modules)\n"
    )
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, check=True)
    assert out.stdout.split() == ["True", "True"]
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        inference.no_such_name  # noqa: B018


def test_the_trainer_and_the_server_import_no_cli_module():
    cli_modules = {"speechlm.commands.eval", "speechlm.commands.transcribe"}
    for folder in ("train", "serve"):
        for path in (REPO / "speechlm" / folder).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module == "speechlm":
                    names = {f"speechlm.{a.name}" for a in node.names}
                elif isinstance(node, ast.ImportFrom):
                    names = {node.module or ""}
                elif isinstance(node, ast.Import):
                    names = {a.name for a in node.names}
                else:
                    continue
                assert not names & cli_modules, f"{path.name} imports {names & cli_modules}"
