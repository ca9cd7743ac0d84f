"""per_device_train_batch_size=auto: the config value, the plan's pick per device, and the trainer
resolving it on CPU from a stated device memory (SPEECHLM_DEVICE_MEMORY_GIB)."""

from __future__ import annotations

import json

import pytest
import yaml

from speechlm.config import Config, ConfigError, load
from speechlm.plan import GIB, USABLE_FRACTION, model_shapes
from speechlm.plan.auto import EFFICIENT_TOKENS, pick, step_bytes
from speechlm.train import autobatch
from speechlm.train.checkpoint import CheckpointManager
from speechlm.train.run import resolve_run


def test_auto_is_a_value_and_bad_strings_name_the_key():
    assert load(Config, None, None, []).training.per_device_train_batch_size == "auto"  # production
    with pytest.raises(ConfigError, match=r"per_device_train_batch_size: expected int or one of 'auto', got 'big'"):
        load(Config, None, None, ["training.per_device_train_batch_size=big"])
    with pytest.raises(ConfigError, match="gradient_accumulation_steps: chosen by per_device_train_batch_size=auto"):
        load(Config, None, None, ["training.gradient_accumulation_steps=4"])
    with pytest.raises(ConfigError, match="needs data.batching=clips"):
        load(Config, None, None, ["data.batching=seconds", "data.batch_seconds=300"])


@pytest.mark.parametrize("gib", [24, 48, 80, 141])
def test_production_pick_keeps_256_clips_per_step(gib):
    cfg = load(Config, None, None, [])
    p = pick(cfg, model_shapes(cfg), gib, world=1, clip_seconds=19.0)
    assert p.micro * p.accumulation == 256
    assert p.peak_bytes <= gib * GIB * USABLE_FRACTION
    # the next larger micro batch would not fit (with the chosen checkpointing)
    if p.micro < 256:
        bigger = min(b for b in (2 * p.micro, 256) if 256 % b == 0)
        assert (
            step_bytes(cfg, model_shapes(cfg), bigger, p.gradient_checkpointing, world=1, clip_seconds=19.0)
            > gib * GIB * USABLE_FRACTION
        )
    print(f"{gib} GiB: {p.describe()}")


def test_checkpointing_only_where_it_pays():
    cfg = load(Config, None, None, [])
    shapes = model_shapes(cfg)
    small, large = (pick(cfg, shapes, g, world=1, clip_seconds=19.0) for g in (24, 141))
    assert small.gradient_checkpointing and "checkpointing without it only" in small.reason
    assert not large.gradient_checkpointing  # enough clips fit without: no recompute cost
    # a recipe that asks for checkpointing keeps it
    on = load(Config, None, None, ["training.gradient_checkpointing=true"])
    assert pick(on, model_shapes(on), 141, world=1, clip_seconds=19.0).gradient_checkpointing
    assert EFFICIENT_TOKENS > 0


def test_nothing_fits_is_a_config_error():
    cfg = load(Config, None, None, [])
    with pytest.raises(ConfigError, match="not even 1 clip of 19.0 s fits 4 GiB"):
        pick(cfg, model_shapes(cfg), 4, world=1, clip_seconds=19.0)


def test_plan_auto_and_checkpointing(monkeypatch):
    """make_plan as `python -m speechlm.plan --json` prints it (tests/plan/test_plan.py runs the CLI itself)."""
    from speechlm.plan import make_plan

    monkeypatch.setenv(autobatch.ENV, "141")  # the plan also shows the pick for a stated device
    off = make_plan(load(Config, None, None, ["training.per_device_train_batch_size=auto"]))
    on = make_plan(load(Config, None, None, ["training.gradient_checkpointing=true"]))
    assert off["config"]["per_device_train_batch_size"] == "auto" and off["config"]["memory_at_batch"] == 256
    assert on["memory_bytes"]["activations"] < off["memory_bytes"]["activations"] / 4
    assert all(f["per_device_train_batch_size"] * f["gradient_accumulation_steps"] == 256 for f in off["gpus"])
    h200 = next(f for f in off["gpus"] if f["memory_gib"] == 141)
    assert (off["auto"]["per_device_train_batch_size"], off["auto"]["gradient_accumulation_steps"]) == (
        h200["per_device_train_batch_size"],
        h200["gradient_accumulation_steps"],
    )


def test_cpu_without_a_stated_memory_is_refused(monkeypatch):
    monkeypatch.delenv(autobatch.ENV, raising=False)
    with pytest.raises(ConfigError, match=autobatch.ENV):
        autobatch.device_memory_gib()
    monkeypatch.setenv(autobatch.ENV, "lots")
    with pytest.raises(ConfigError, match="expected the device memory in GiB"):
        autobatch.device_memory_gib()


def test_trainer_resolves_auto_from_the_stated_memory(synthetic_shards, tmp_path, monkeypatch):
    from speechlm.plan import data_facts
    from speechlm.train.loop import Trainer

    cfg = load(
        Config,
        "tiny",
        None,
        [
            f"data.train=[{{path: {synthetic_shards}, split: train}}]",
            "data.eval=[]",
            "data.num_workers=0",
            "training.per_device_train_batch_size=auto",
            "training.clips_per_step_per_device=16",
            "training.max_steps=2",
            "training.eval_steps=0",
            "training.save_steps=0",
            f"training.output_dir={tmp_path}",
            "training.run_name=auto",
        ],
    )
    # a device that holds the worst case at 4 clips but not at 8 (without checkpointing)
    shapes = model_shapes(cfg)
    clip = data_facts(cfg)["max_clip_seconds"]
    gib = step_bytes(cfg, shapes, 4, False, world=1, clip_seconds=clip) * 1.0001 / GIB / USABLE_FRACTION
    expected = pick(cfg, shapes, gib, world=1, clip_seconds=clip)
    assert expected.accumulation > 1
    monkeypatch.setenv(autobatch.ENV, f"{gib:.6f}")
    trainer = Trainer(cfg)
    assert trainer.run() == 0
    t = trainer.cfg.training
    assert (t.per_device_train_batch_size, t.gradient_accumulation_steps, t.gradient_checkpointing) == (
        expected.micro,
        expected.accumulation,
        expected.gradient_checkpointing,
    )
    saved = yaml.safe_load((trainer.run_dir / "config.yaml").read_text())["training"]
    assert saved["per_device_train_batch_size"] == expected.micro
    first = json.loads((trainer.run_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert first["effective_batch_size"] == 16
    assert cfg.training.per_device_train_batch_size == "auto"  # the config given is not changed
    # a resume keeps what the checkpoint recorded, whatever the device now offers: the data order
    # depends on the micro batch
    again = load(
        Config,
        "tiny",
        None,
        [
            f"data.train=[{{path: {synthetic_shards}, split: train}}]",
            "data.eval=[]",
            "training.per_device_train_batch_size=auto",
            "training.clips_per_step_per_device=16",
            f"training.output_dir={tmp_path}",
            "training.run_name=auto",
            "training.resume_from_checkpoint=auto",
        ],
    )
    path = CheckpointManager(trainer.run_dir).resolve(again.training.resume_from_checkpoint)
    run = resolve_run(
        again,
        world=1,
        device_name="cpu",
        bf16_supported=True,
        saved=CheckpointManager.read_state(path),
        saved_path=path,
        device_memory=(1000.0, "stated"),
    )
    p = run.auto
    assert (p.micro, p.accumulation) == (expected.micro, expected.accumulation) and "checkpoint" in p.reason
    assert (run.micro, run.accumulation) == (expected.micro, expected.accumulation)
    assert again.training.per_device_train_batch_size == "auto"


def test_probe_runs_on_cuda_only_and_halves_to_divisors_of_the_step():
    """What the probe decides without a GPU (its CUDA run is bench/gpu_check.py's): no CUDA leaves the
    plan's pick as it is; after an OOM the next try is the largest divisor of the clips per step at
    most half; 1 clip out of memory is a ConfigError."""
    import dataclasses

    import torch

    cfg = load(Config, None, None, [])
    p = pick(cfg, model_shapes(cfg), 80, world=1, clip_seconds=19.0)
    assert autobatch.probe(cfg, None, p, torch.device("cpu"), world=1) is p
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.micro = 1  # a pick is a value: the probe returns a new one
    tries, micro = [], 12
    while micro > 1:
        micro = autobatch._halved(12, micro, 19.0, "cuda:0")
        tries.append(micro)
    assert tries == [6, 3, 1]
    with pytest.raises(ConfigError, match=r"1 clip of 19.0 s runs out of memory on cuda:0; raise deepspeed.zero_stage"):
        autobatch._halved(12, 1, 19.0, "cuda:0")
