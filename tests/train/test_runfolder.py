"""Run folders and starting points (issue 35): re-running a command into a finished run's folder resumes
it or stops, never retrains over it (mistake 4); `model.init_from` fine-tunes from a trained model with
a fresh optimizer, schedule and data position, and resuming on other data warns (mistake 5); a
warm-up longer than the run is said (mistake 6). The real tiny twin, in this process (world size 1)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from deepspeed.utils import safe_get_full_fp32_param
from safetensors.torch import load_file

from speechlm import config as config_mod
from speechlm.config import Config, ConfigError
from speechlm.model.folder.io import from_pretrained
from speechlm.train.loop import Trainer

STEPS = 4


def cfg(tmp: Path, name: str, shards: Path, *extra) -> Config:
    return config_mod.load(
        Config,
        "tiny",
        None,
        [
            "training.per_device_train_batch_size=16",
            f"training.max_steps={STEPS}",
            "training.warmup_steps=10",  # longer than the run: a warning (mistake 6)
            "training.eval_steps=0",
            "training.save_steps=2",
            "training.logging_steps=1",
            "data.max_eval_samples_per_dataset=16",
            "data.num_workers=1",
            "data.augment.enabled=false",
            f"training.output_dir={tmp}",
            f"training.run_name={name}",
            f"data.train=[{{path: {shards}, split: train}}]",
            f"data.eval=[{{path: {shards}, split: eval}}]",
            *extra,
        ],
    )


def steps_logged(run_dir: Path) -> list[int]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in rows if "train/loss" in r]


@pytest.fixture(scope="module")
def first(tmp_path_factory, synthetic_shards, dist_world):
    tmp = tmp_path_factory.mktemp("runs")
    assert Trainer(cfg(tmp, "a", synthetic_shards)).run() == 0
    return tmp, synthetic_shards


def test_6_a_warmup_longer_than_the_run_is_said(first, caplog):
    tmp, shards = first
    caplog.set_level("WARNING", logger="speechlm.train")
    t = Trainer(cfg(tmp, "warm", shards, "training.max_steps=1"))
    assert t.run() == 0
    assert "training.warmup_steps=10 is not shorter than the run's 1 steps" in caplog.text


def test_4_the_same_command_again_resumes_and_keeps_one_history(first, caplog):
    tmp, shards = first
    run_dir = tmp / "a"
    before = steps_logged(run_dir)
    assert before == list(range(1, STEPS + 1))
    caplog.set_level("WARNING", logger="speechlm.train")
    again = Trainer(cfg(tmp, "a", shards))
    assert again.run() == 0
    assert f"holds this run (same config) up to step {STEPS}: resuming it" in caplog.text
    assert again.step == STEPS and steps_logged(run_dir) == before  # no second history from step 0
    assert (run_dir / "checkpoints" / "latest").read_text() == f"step-{STEPS}"


def test_4_another_config_in_a_run_folder_is_an_error_with_the_ways_out(first):
    tmp, shards = first
    run_dir = tmp / "a"
    before = (run_dir / "metrics.jsonl").read_text()
    with pytest.raises(ConfigError) as e:
        Trainer(cfg(tmp, "a", shards, "training.learning_rate=0.02")).run()
    msg = str(e.value)
    assert (
        f"holds a run with checkpoints up to step {STEPS} and another config (training.learning_rate: 0.01 -> 0.02)"
        in msg
    )
    for way_out in ("training.resume_from_checkpoint=auto", "training.run_name=NEW_NAME", "--overwrite"):
        assert way_out in msg
    assert (run_dir / "metrics.jsonl").read_text() == before  # nothing touched


def test_4_overwrite_starts_over_in_the_folder(first):
    tmp, shards = first
    shutil.copytree(tmp / "a", tmp / "b")
    (tmp / "b" / "eval").mkdir()  # an earlier eval's output: stale once the run is redone
    t = Trainer(cfg(tmp, "b", shards, "training.learning_rate=0.02", "training.max_steps=2"), overwrite=True)
    assert t.run() == 0
    assert steps_logged(tmp / "b") == [1, 2] and not (tmp / "b" / "eval").exists()
    state = json.loads((tmp / "b" / "checkpoints" / "step-2" / "trainer_state.json").read_text())
    assert state["config"]["training"]["learning_rate"] == 0.02
    assert not (tmp / "b" / "checkpoints" / f"step-{STEPS}").exists()


def test_5_init_from_loads_the_trained_parts_with_a_fresh_start(first, caplog):
    tmp, shards = first
    caplog.set_level("WARNING", logger="speechlm.train")
    final = tmp / "a" / "final"
    ft = Trainer(cfg(tmp, "ft", shards, f"model.init_from={final}"))
    ft.setup()
    try:
        # the folder's trained values, as written (fp32): the projector's file and the adapter peft loads
        theirs = {n: v for n, v in load_file(str(final / "model.safetensors")).items() if n.startswith("projector.")}
        theirs.update({n: p.detach() for n, p in from_pretrained(final).named_parameters() if "lora_" in n})
        mine = dict(ft.model.named_parameters())
        # the optimizer's fp32 masters (the module holds their bf16 copies); buffers as they are
        mine = {n: safe_get_full_fp32_param(p) for n, p in mine.items()} | dict(ft.model.named_buffers())
        assert len(theirs) > 4 and set(theirs) <= set(mine)
        for n, v in theirs.items():
            assert torch.equal(mine[n].float(), v.float()), n
        assert "projector, LoRA loaded; the optimizer, LR schedule and data position start fresh" in caplog.text
        assert ft.step == 0 and ft.train_loader.epoch == 0
        assert ft.scheduler.get_last_lr()[0] == 0.0  # the warm-up starts again
    finally:
        ft.finish()
    # the folder records no path of this machine: init_from is where the run started, not the model
    assert "init_from" not in (final / "config.json").read_text()


def test_5_init_from_checks_the_bases_and_shapes(first):
    tmp, shards = first
    final = tmp / "a" / "final"
    with pytest.raises(
        ConfigError, match=r"model.lora_rank: 4, but model.init_from .*final has 8 .*set model.lora_rank=8"
    ):
        Trainer(cfg(tmp, "x", shards, f"model.init_from={final}", "model.lora_rank=4")).run()
    with pytest.raises(ConfigError, match=r"model.text_model_id: 'tiny/qwen3'.* trained on the decoder 'tiny/qwen3_5'"):
        Trainer(cfg(tmp, "x", shards, f"model.init_from={final}", "model.text_model_id=tiny/qwen3")).run()
    with pytest.raises(ConfigError, match=r"model.init_from: .* is not a speechlm model folder"):
        Trainer(cfg(tmp, "x", shards, f"model.init_from={tmp}")).run()


def test_5_resuming_on_other_data_warns_and_says_how_to_fine_tune(first, caplog):
    tmp, shards = first
    caplog.set_level("WARNING", logger="speechlm.train")
    ckpt = tmp / "a" / "checkpoints" / f"step-{STEPS}"
    t = Trainer(
        cfg(
            tmp,
            "other",
            shards,
            f"training.resume_from_checkpoint={ckpt}",
            f"data.train=[{{path: {shards}, split: eval}}]",
        )
    )
    t.setup()
    t.finish()
    assert f"resuming {ckpt} on other data (data.train changed)" in caplog.text
    assert f"model.init_from={ckpt}" in caplog.text
    assert load_file(str(ckpt / "model" / "model.safetensors"))  # the checkpoint it names is a model folder
