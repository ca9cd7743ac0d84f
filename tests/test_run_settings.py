"""A run's settings from (config, world, device, saved state), with no process group and no model."""

from __future__ import annotations

import pytest

from speechlm import config as config_mod
from speechlm.config import Config, ConfigError
from speechlm.model.build import make_loss
from speechlm.model.loss import LOSSES
from speechlm.plan import model_shapes, step_memory
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
    run = resolve_run(
        cfg_with(),
        world=1,
        device_name="cpu",
        bf16_supported=True,
        saved=saved_state(4, 2, 2),
        saved_path="ckpt/step-3",
    )
    assert run.cfg.training.gradient_accumulation_steps == 4 and run.configured_accumulation == 2
    assert run.ds_config["train_batch_size"] == 16 and run.ds_config["checkpoint"]["load_universal"] is True
    assert "2 -> 1 processes" in run.elastic_line


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
