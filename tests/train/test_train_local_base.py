"""A run on a local decoder folder that ends early (issue 36): the real trainer (tiny recipe, this
process), its decoder given as a relative path the way a user types it. SIGTERM after the first
checkpoint, or a crash: no `final`, and the run's last line names the checkpoint and the command
that exports it; that command works with no flag from another working folder (the resolved config
names the base by its absolute path), and the export loads and transcribes."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import threading
import time

import pytest

from model_helpers import waves
from speechlm import config as config_mod
from speechlm import inference
from speechlm.config import Config
from speechlm.model import ids
from speechlm.train.loop import Trainer

pytestmark = pytest.mark.slow


def _trainer(tmp, shards, name: str) -> Trainer:
    cfg = config_mod.load(
        Config,
        "tiny",
        None,
        [
            "model.text_model_id=models/my-decoder",  # relative to the folder the run starts in
            "training.output_dir=outputs",
            f"training.run_name={name}",
            "training.max_steps=40",
            "training.save_steps=1",
            "training.eval_steps=0",
            "training.warmup_steps=0",
            "training.per_device_train_batch_size=8",
            "training.save_total_limit=null",
            "data.num_workers=0",
            "data.augment.enabled=false",
            f"data.train=[{{path: {shards}, split: train}}]",
            "data.eval=[]",
        ],
    )
    return Trainer(cfg)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    shutil.copytree(ids.resolve("tiny/qwen3_5"), tmp_path / "models" / "my-decoder")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _sigterm_after_first_checkpoint(latest):
    def kill():
        deadline = time.monotonic() + 300
        while not latest.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)  # as a scheduler pre-empts a job

    threading.Thread(target=kill, daemon=True).start()


def _check_exports(workdir, run, step: str, monkeypatch):
    from speechlm.commands.export import main as export

    elsewhere = workdir / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not where the run started: the relative path would not resolve here
    export([str(workdir / run), "exported"])  # the run folder: its newest checkpoint
    export([str(workdir / run / "checkpoints" / step), "exported-step"])
    for out in ("exported", "exported-step"):
        model = inference.load_model(out)
        assert model.bases["decoder"]["id"] == "my-decoder"
        assert len(inference.transcribe_waves(model, [waves((16000,))[0]])) == 1


def test_a_sigterm_run_says_how_to_export_and_its_checkpoints_export(workdir, synthetic_shards, caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="speechlm")
    trainer = _trainer(workdir, synthetic_shards, "killed")
    _sigterm_after_first_checkpoint(workdir / "outputs" / "killed" / "checkpoints" / "latest")
    assert trainer.run() == 128 + signal.SIGTERM
    run = workdir / "outputs" / "killed"
    assert not (run / "final").exists()
    latest = (run / "checkpoints" / "latest").read_text().strip()
    last = [r.getMessage() for r in caplog.records if r.name.startswith("speechlm")][-1]
    assert last.startswith(f"stopped early at step {trainer.step} (exit 143)")
    assert f"checkpoint {latest} holds the model: `speechlm export outputs/killed OUT`" in last
    state = json.loads((run / "checkpoints" / latest / "trainer_state.json").read_text())
    assert state["config"]["model"]["text_model_id"] == str((workdir / "models" / "my-decoder").resolve())
    _check_exports(workdir, "outputs/killed", latest, monkeypatch)


def test_a_crashed_run_says_how_to_export(workdir, synthetic_shards, caplog, monkeypatch):
    """A fault injected into the third step (the loop's own step function raises, as an OOM would)."""
    caplog.set_level(logging.INFO, logger="speechlm")
    trainer = _trainer(workdir, synthetic_shards, "crashed")
    real = Trainer._accumulate

    def failing(self, batches):
        if self.step == 2:
            raise RuntimeError("injected fault")
        return real(self, batches)

    monkeypatch.setattr(Trainer, "_accumulate", failing)
    with pytest.raises(RuntimeError, match="injected fault"):
        trainer.run()
    last = [r.getMessage() for r in caplog.records if r.name.startswith("speechlm")][-1]
    assert last.startswith("crashed at step 2 (RuntimeError)")
    assert "checkpoint step-2 holds the model: `speechlm export outputs/crashed OUT`" in last
    monkeypatch.undo()
    monkeypatch.chdir(workdir)
    _check_exports(workdir, "outputs/crashed", "step-2", monkeypatch)
