"""A run's settings from (config, world, device, saved state), with no process group and no model."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import yaml

from speechlm import config as config_mod
from speechlm.config import Config, ConfigError
from speechlm.model.build import make_loss
from speechlm.model.loss import LOSSES
from speechlm.plan import model_shapes, step_memory
from speechlm.train import autobatch
from speechlm.train.run import resolve_run


def cfg_with(*overrides) -> Config:
    return config_mod.load(
        Config,
        "tiny",
        None,
        ["training.per_device_train_batch_size=4", "training.gradient_accumulation_steps=2", *overrides],
    )


def saved_state(micro, acc, world):
    return {
        "world_size": world,
        "config": {"training": {"per_device_train_batch_size": micro, "gradient_accumulation_steps": acc}},
        "batch": {"micro": micro, "accumulation": acc, "world": world, "configured_accumulation": acc},
    }


def test_fresh_run_fills_the_ds_config_and_leaves_the_config_alone():
    cfg = cfg_with()
    run = resolve_run(cfg, world=2, device_name="cpu", bf16_supported=True)
    assert run.ds_config["train_batch_size"] == 16 == run.effective_batch
    assert run.ds_config["gradient_accumulation_steps"] == 2 and run.ds_config["bf16"]["enabled"] is True
    assert not run.load_universal and run.elastic_line is None and run.auto is None
    assert run.loss == "chunked_ce" and run.cfg is not cfg


def test_elastic_resume_keeps_the_effective_batch_and_loads_universal_state():
    cfg = cfg_with()
    before = copy.deepcopy(cfg)
    run = resolve_run(
        cfg,
        world=1,
        device_name="cpu",
        bf16_supported=True,
        saved=saved_state(4, 2, 2),
        saved_path="ckpt/step-3",
    )
    assert run.cfg.training.gradient_accumulation_steps == 4 and run.configured_accumulation == 2
    assert run.ds_config["train_batch_size"] == 16 and run.ds_config["checkpoint"]["load_universal"] is True
    assert "2 -> 1 processes" in run.elastic_line
    assert cfg == before  # the re-plan is in the settings' own config
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.world = 2


def test_a_card_without_bf16_trains_in_fp32():
    cfg = cfg_with()
    run = resolve_run(cfg, world=1, device_name="Tesla T4", bf16_supported=False)
    assert run.cfg.training.bf16 is False and run.cfg.model.model_dtype == "float32"
    assert run.ds_config["bf16"]["enabled"] is False and cfg.training.bf16 is True


def test_auto_batch_from_the_stated_memory_or_as_the_checkpoint_recorded():
    cfg = cfg_with(
        "training.per_device_train_batch_size=auto",
        "training.gradient_accumulation_steps=1",
        "training.clips_per_step_per_device=8",
    )
    run = resolve_run(cfg, world=1, device_name="cpu", bf16_supported=True, device_memory=(1000.0, "stated"))
    t = run.cfg.training
    picked = (t.per_device_train_batch_size, t.gradient_accumulation_steps)
    assert picked == (8, 1) == (run.auto.micro, run.auto.accumulation)
    assert run.ds_config["train_micro_batch_size_per_gpu"] == 8
    resumed = resolve_run(
        cfg,
        world=1,
        device_name="cpu",
        bf16_supported=True,
        device_memory=(1000.0, "stated"),
        saved=saved_state(2, 4, 1),
        saved_path="ckpt/step-5",
    )
    assert (resumed.auto.micro, resumed.auto.accumulation) == (2, 4) and "ckpt/step-5" in resumed.auto.reason
    assert resumed.ds_config["train_micro_batch_size_per_gpu"] == 2


def test_the_loss_is_configured_and_states_its_logits_memory_to_the_planner():
    with pytest.raises(ConfigError, match="training.loss: unknown loss 'focal'.*chunked_ce"):
        make_loss(cfg_with("training.loss=focal").training)
    shapes = model_shapes(cfg_with())
    for name in LOSSES:
        cfg = cfg_with(f"training.loss={name}")
        mem = step_memory(cfg, shapes, batch=2, world=1, clip_seconds=4.0)
        labels = 2 * 15  # ceil(4 s x 3.5 tokens/s) + 1 per clip
        assert mem["logits"] == make_loss(cfg.training).logits_bytes(labels, shapes.vocab_size, 2)
    assert LOSSES["full_ce"]().logits_bytes(30, 512, 2) == 30 * 512 * 12


def test_steps_are_decided_from_the_loader_and_a_world_change_keeps_the_schedule():
    fresh = resolve_run(cfg_with("training.max_steps=-1"), world=1, device_name="cpu", bf16_supported=True)
    assert fresh.total_steps is None  # stage 3 decides it
    run = fresh.with_steps(batches_per_epoch=9)  # 9 micro batches, accumulation 2: 4 optimizer steps
    assert (run.steps_per_epoch, run.total_steps, fresh.total_steps) == (4, 4, None)
    with pytest.raises(ConfigError, match="1 batches per rank per epoch is fewer than"):
        fresh.with_steps(batches_per_epoch=1)
    state = {**saved_state(4, 2, 2), "total_steps": 50}
    moved = resolve_run(cfg_with("training.max_steps=-1"), world=1, device_name="cpu", bf16_supported=True, saved=state)
    assert moved.accumulation == 4 and moved.with_steps(batches_per_epoch=9).total_steps == 50
    same = resolve_run(cfg_with("training.max_steps=-1"), world=2, device_name="cpu", bf16_supported=True, saved=state)
    assert same.with_steps(batches_per_epoch=9).total_steps == 4  # same layout: the data decides


def tiny_setup_config(shards, out, *overrides) -> Config:
    return config_mod.load(
        Config,
        "tiny",
        None,
        [
            f"data.train=[{{path: {shards}, split: train}}]",
            "data.eval=[]",
            "data.num_workers=0",
            "training.max_steps=1",
            f"training.output_dir={out}",
            "training.run_name=setup",
            "training.final_model=false",
            *overrides,
        ],
    )


@pytest.mark.parametrize(
    "batch",
    [
        ["training.per_device_train_batch_size=4", "training.gradient_accumulation_steps=2"],
        ["training.per_device_train_batch_size=auto", "training.clips_per_step_per_device=8"],
    ],
    ids=["number", "auto"],
)
def test_setup_decides_the_run_once_and_leaves_the_config_as_given(synthetic_shards, tmp_path, monkeypatch, batch):
    from speechlm.train.loop import Trainer

    monkeypatch.setenv(autobatch.ENV, "1000")  # the memory `auto` plans for on this CPU
    cfg = tiny_setup_config(synthetic_shards, tmp_path, *batch)
    before = copy.deepcopy(cfg)
    trainer = Trainer(cfg)
    trainer.setup()
    try:
        s = trainer.settings
        assert cfg == before and trainer.config is cfg
        assert trainer.cfg is s.cfg and s.cfg is not cfg and s.cfg.training is not cfg.training
        assert (s.micro, s.accumulation, s.effective_batch) == ((4, 2, 8) if s.auto is None else (8, 1, 8))
        assert s.total_steps == 1 and s.steps_per_epoch == 64 // 8
        recorded = yaml.safe_load((trainer.run_dir / "config.yaml").read_text())["training"]
        assert (recorded["per_device_train_batch_size"], recorded["gradient_accumulation_steps"]) == (
            s.micro,
            s.accumulation,
        )
        assert trainer.engine.train_micro_batch_size_per_gpu() == s.micro
        assert trainer.engine.gradient_accumulation_steps() == s.accumulation
    finally:
        trainer.finish()


def test_the_planner_shapes_are_built_once_per_run_from_the_trainers_family(monkeypatch):
    """The auto batch plans from one meta-device build per run, with the encoder family the trainer
    resolved (none resolved again), and hands those shapes on to the CUDA probe."""
    from speechlm.plan import models

    built, resolved = [], []
    real_shapes, real_family = models.model_shapes, models.encoder_family
    monkeypatch.setattr(
        autobatch, "model_shapes", lambda c, family=None: built.append(family) or real_shapes(c, family)
    )
    monkeypatch.setattr(models, "encoder_family", lambda *a, **k: resolved.append(a) or real_family(*a, **k))
    cfg = cfg_with(
        "training.per_device_train_batch_size=auto",
        "training.gradient_accumulation_steps=1",
        "training.clips_per_step_per_device=8",
    )
    family = real_family(cfg.model.audio_model_id)
    run = resolve_run(
        cfg, world=1, device_name="cpu", bf16_supported=True, device_memory=(1000.0, "stated"), family=family
    )
    assert built == [family] and resolved == []
    assert run.auto.shapes == real_shapes(cfg, family) and run.auto.shapes.trainable_params > 0
    reserve = autobatch.optimizer_state_bytes(run.cfg, 1, run.auto.shapes)
    assert reserve == 12 * run.auto.shapes.trainable_params  # bf16: fp32 masters and AdamW's two moments
