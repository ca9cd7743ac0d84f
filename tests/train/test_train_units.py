"""Trainer units: the launcher's environment, ds config fill-in, optimizer groups and schedule, and the
non-finite guard and clipping on a real DeepSpeed engine (world size 1, gloo) wrapping a small
stand-in module (tests/train/standin.py; its checkpoints: tests/train/test_checkpoint.py)."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys

import pytest
import torch

from speechlm.config import ConfigError
from speechlm.train import engine as engine_mod
from speechlm.train import optim
from standin import StandIn, batch, cfg_with, make_engine, train_steps, trainable

# --------------------------------------------------------------------------- launcher env


@pytest.mark.parametrize("given", [{}, {"RANK": "0", "WORLD_SIZE": "1"}])
def test_single_process_gets_a_free_port_of_its_own(monkeypatch, given):
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(k, "")  # recorded, so what the function sets is undone at teardown
        monkeypatch.delenv(k)
    for k, v in given.items():
        monkeypatch.setenv(k, v)
    engine_mod.default_launcher_env()

    assert (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"]) == ("0", "1", "0")
    with socket.socket() as s:  # the port it picked is free to bind
        s.bind(("127.0.0.1", int(os.environ["MASTER_PORT"])))


def test_launcher_env_is_left_alone(monkeypatch):
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    engine_mod.default_launcher_env()
    assert {k: os.environ[k] for k in env} == env


# --------------------------------------------------------------------------- ds config


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_ds_config_filled_from_training_config(stage):
    cfg = cfg_with(
        f"deepspeed.zero_stage={stage}",
        "training.per_device_train_batch_size=6",
        "training.gradient_accumulation_steps=3",
        "training.max_grad_norm=0.5",
        "training.bf16=false",
    )
    ds = engine_mod.build_ds_config(cfg, world_size=4)
    assert ds["train_micro_batch_size_per_gpu"] == 6
    assert ds["gradient_accumulation_steps"] == 3
    assert ds["train_batch_size"] == 6 * 3 * 4
    assert ds["gradient_clipping"] == 0.5
    assert ds["bf16"]["enabled"] is False
    assert ds["zero_optimization"]["stage"] == stage


def test_ds_config_offload_is_zero3_only():
    ds = engine_mod.build_ds_config(cfg_with("deepspeed.zero_stage=3", "deepspeed.offload=true"), 1)
    assert ds["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    with pytest.raises(ConfigError, match="deepspeed.offload"):
        engine_mod.build_ds_config(cfg_with("deepspeed.zero_stage=2", "deepspeed.offload=true"), 1)


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("train_micro_batch_size_per_gpu", 4, "train_micro_batch_size_per_gpu"),
        ("gradient_clipping", 2.0, "gradient_clipping"),
        ("bf16", {"enabled": False}, "bf16.enabled"),
        ("zero_optimization", {"stage": 3}, "zero_optimization.stage"),
        ("optimizer", {"type": "Adam"}, "optimizer"),
    ],
)
def test_ds_config_contradiction_is_a_config_error(tmp_path, key, value, message):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({key: value}))
    cfg = cfg_with(
        f"deepspeed.config={path}",
        "training.per_device_train_batch_size=8",
        "training.bf16=true",
        "deepspeed.zero_stage=2",
    )
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        engine_mod.build_ds_config(cfg, 1)


def test_ds_config_agreeing_values_are_fine(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 8, "gradient_clipping": 1.0}))
    cfg = cfg_with(f"deepspeed.config={path}", "training.per_device_train_batch_size=8")
    assert engine_mod.build_ds_config(cfg, 2)["train_batch_size"] == 16


def test_ds_config_missing_file_is_a_config_error():
    with pytest.raises(ConfigError, match="deepspeed.config"):
        engine_mod.build_ds_config(cfg_with("deepspeed.config=/nope/ds.json"), 1)


# --------------------------------------------------------------------------- optimizer + schedule


def expected_lr(base, step, warmup, total):
    if step < warmup:
        return base * step / warmup
    return base * 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))


def test_groups_and_cosine_schedule_match_the_formula():
    t = cfg_with(
        "training.warmup_steps=10", "training.learning_rate=1e-3", "training.decoder_learning_rate=1e-4"
    ).training
    model = StandIn()
    opt = optim.build_optimizer(model, t)
    # the frozen encoder group is dropped, the others keep their lr / weight decay
    assert [g["name"] for g in opt.param_groups] == ["projector", "decoder"]
    assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]
    sched = optim.build_scheduler(opt, t, total_steps=50)
    seen = {}
    for step in range(51):
        seen[step] = [g["lr"] for g in opt.param_groups]
        opt.step()
        sched.step()
    for step in (0, 1, 5, 10, 11, 30, 49, 50):
        for lr, base in zip(seen[step], (1e-3, 1e-4)):
            assert lr == pytest.approx(expected_lr(base, step, 10, 50), rel=1e-9, abs=1e-15), step
            assert lr / base == pytest.approx(optim.lr_factor(step, 10, 50), rel=1e-9, abs=1e-12)
    assert seen[10][0] == pytest.approx(1e-3) and seen[50][0] == pytest.approx(0.0, abs=1e-15)


def test_total_steps_from_epochs_or_max_steps():
    t = cfg_with("training.num_train_epochs=2.5", "training.max_steps=-1").training
    assert optim.total_steps(t, 40) == 100
    t = cfg_with("training.max_steps=7").training
    assert optim.total_steps(t, 40) == 7


def test_every_trainable_parameter_is_in_a_group():
    model = StandIn()
    model.extra = torch.nn.Linear(2, 2)  # trainable, but in no group: would silently never train
    with pytest.raises(ValueError, match="no optimizer group"):
        optim.build_optimizer(model, cfg_with().training)


# --------------------------------------------------------------------------- real engine, stand-in module


@pytest.mark.parametrize("stage", [2, 3])
def test_nonfinite_batch_skips_the_update(dist_world, stage):
    engine, model = make_engine(stage=stage)
    train_steps(engine, 1)
    before = [p.detach().clone() for p in engine.optimizer.param_groups[0]["params"]] if stage != 3 else None
    x, y = batch(3)
    x[0, 0] = float("nan")
    loss = engine(x, y)
    engine.backward(loss)
    engine.step()
    assert not engine.was_step_applied()
    if before is not None:
        for a, b in zip(before, engine.optimizer.param_groups[0]["params"]):
            assert torch.equal(a, b)
    train_steps(engine, 1, seed=4)  # and the next finite batch trains again
    assert engine.was_step_applied()


def test_clipping_holds_the_norm(dist_world):
    engine, model = make_engine(clip=1e-3)
    w0 = trainable(model)
    x, y = batch(1)
    loss = engine(x * 100, y * 100)
    engine.backward(loss)
    engine.step()
    assert engine.get_global_grad_norm() > 1.0  # reported norm is before clipping
    # first Adam step moves each weight by ~lr regardless of the norm, so check the clipped gradient
    # through the optimizer state: exp_avg = (1 - beta1) * clipped grad
    groups = (
        engine.optimizer.optimizer.param_groups
        if hasattr(engine.optimizer, "optimizer")
        else engine.optimizer.param_groups
    )
    sq = 0.0
    for g in groups:
        for p in g["params"]:
            st = (
                engine.optimizer.optimizer.state[p]
                if hasattr(engine.optimizer, "optimizer")
                else engine.optimizer.state[p]
            )
            sq += float((st["exp_avg"] / 0.1).pow(2).sum())
    assert math.sqrt(sq) == pytest.approx(1e-3, rel=1e-3)
    assert any(not torch.equal(p, w0[n]) for n, p in model.named_parameters())


@pytest.mark.parametrize(
    "override,message",
    [
        ("deepspeed.zero_stage=4", "deepspeed.zero_stage: must be 1, 2 or 3"),
        ("training.learnig_rate=1", "did you mean 'learning_rate'"),
    ],
)
def test_cli_config_error_is_one_line_exit_2(tmp_path, override, message):
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    p = subprocess.run(
        [sys.executable, "launch/train.py", "--config", "tiny", f"training.output_dir={tmp_path}", override],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert p.returncode == 2
    lines = [x for x in p.stderr.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], p.stderr[-2000:]
    assert "Traceback" not in p.stderr
