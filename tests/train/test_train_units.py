"""Trainer units: ds config fill-in, schedule, and checkpoints / the non-finite guard on a real
DeepSpeed engine (world size 1, gloo) wrapping a small stand-in module."""

from __future__ import annotations

import json
import logging
import math
import os
import resource
import signal
import socket
import subprocess
import sys

import pytest
import torch

from speechlm import config as config_mod
from speechlm.config import Config, ConfigError
from speechlm.train import checkpoint as ckpt_mod
from speechlm.train import engine as engine_mod
from speechlm.train import optim


def cfg_with(*overrides):
    # a fixed micro batch unless a test says otherwise (production's "auto" needs a device to resolve)
    return config_mod.load(Config, "production", None, ["training.per_device_train_batch_size=8", *overrides])


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


class StandIn(torch.nn.Module):
    """Frozen 'encoder', trainable 'projector' and 'decoder', with the SpeechLM group interface."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.encoder = torch.nn.Linear(4, 8)
        self.projector = torch.nn.Linear(8, 8)
        self.decoder = torch.nn.Linear(8, 1)
        self.encoder.requires_grad_(False)

    def parameter_groups(self, t):
        return [
            {
                "name": "projector",
                "params": list(self.projector.parameters()),
                "lr": t.learning_rate,
                "weight_decay": t.projector_weight_decay,
            },
            {
                "name": "decoder",
                "params": list(self.decoder.parameters()),
                "lr": t.decoder_learning_rate,
                "weight_decay": t.weight_decay,
            },
            {
                "name": "encoder",
                "params": list(self.encoder.parameters()),
                "lr": t.encoder_learning_rate,
                "weight_decay": t.weight_decay,
            },
        ]

    def forward(self, x, y):
        return torch.nn.functional.mse_loss(self.decoder(torch.tanh(self.projector(self.encoder(x)))).squeeze(-1), y)

    def save_pretrained(self, d):
        from pathlib import Path

        Path(d).mkdir(parents=True)
        torch.save(self.state_dict(), Path(d) / "model.pt")


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


@pytest.fixture(scope="module")
def dist_world():
    rank, world, device = engine_mod.init_distributed()
    assert (rank, world) == (0, 1)
    # not destroyed at teardown: DeepSpeed caches the group, and other test modules reuse it
    return device


def make_engine(stage=2, clip=1.0):
    cfg = cfg_with(
        f"deepspeed.zero_stage={stage}",
        "training.per_device_train_batch_size=4",
        "training.bf16=false",
        f"training.max_grad_norm={clip}",
        "training.warmup_steps=0",
    )
    model = StandIn()
    opt = optim.build_optimizer(model, cfg.training)
    sched = optim.build_scheduler(opt, cfg.training, 100)
    return engine_mod.build_engine(model, opt, sched, engine_mod.build_ds_config(cfg, 1)), model


def batch(seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 4, generator=g), torch.randn(4, generator=g)


def train_steps(engine, n, seed=1):
    for i in range(n):
        loss = engine(*batch(seed + i))
        engine.backward(loss)
        engine.step()


def trainable(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_checkpoint_save_load_prune(dist_world, tmp_path):
    engine, model = make_engine()
    mgr = ckpt_mod.CheckpointManager(tmp_path, save_total_limit=2)
    saved = {}
    for step in (1, 2, 3):
        train_steps(engine, 1, seed=step)
        path = mgr.save(step, engine, model, {"epoch": 0}, {"reader": {"step_in_epoch": step}, "rng": {}})
        assert path == tmp_path / "checkpoints" / f"step-{step}"
        saved[step] = trainable(model)
    assert (tmp_path / "checkpoints" / "latest").read_text() == "step-3"
    assert [s for s, _ in mgr.steps()] == [2, 3]  # save_total_limit=2 pruned step-1
    assert (tmp_path / "checkpoints/step-3/model/model.pt").is_file()
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))
    train_steps(engine, 2, seed=9)
    assert not torch.equal(model.projector.weight, saved[3]["projector.weight"])
    state, mine = mgr.load(mgr.resolve("auto"), engine)
    assert state["step"] == 3 and mine["reader"] == {"step_in_epoch": 3}
    for n, p in model.named_parameters():
        assert torch.equal(p, saved[3][n]), n


def test_deepspeeds_zero_to_fp32_runs_as_documented(dist_world, tmp_path):
    """`python zero_to_fp32.py . OUT` in the ds/ folder, as DeepSpeed documents it, recovers the weights."""
    engine, model = make_engine()
    train_steps(engine, 1)
    path = ckpt_mod.CheckpointManager(tmp_path).save(1, engine, model, {"epoch": 0}, {"rng": {}})
    ds = path / "ds"
    assert (ds / "latest").read_text() == ckpt_mod.DS_TAG and (ds / "zero_to_fp32.py").is_file()
    r = subprocess.run(
        [sys.executable, "zero_to_fp32.py", ".", str(tmp_path / "fp32")],
        cwd=ds,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    out = torch.load(tmp_path / "fp32" / "pytorch_model.bin", weights_only=True)  # its default format
    for n, p in model.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(out[n], p.detach().float(), rtol=0, atol=0)


def test_failed_save_keeps_the_previous_checkpoint(dist_world, tmp_path, caplog):
    engine, model = make_engine()
    mgr = ckpt_mod.CheckpointManager(tmp_path, save_total_limit=None)
    train_steps(engine, 1)
    assert mgr.save(1, engine, model, {"epoch": 0}, {"rng": {}}) is not None
    # a real "disk full": the kernel refuses writes past 1 KiB (EFBIG) while the next save runs
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    train_steps(engine, 1, seed=5)
    with caplog.at_level(logging.ERROR, logger="speechlm.train"):
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, old_limit[1]))
        try:
            result = mgr.save(2, engine, model, {"epoch": 0}, {"rng": {}})
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
            signal.signal(signal.SIGXFSZ, old_handler)
    assert result is None
    assert "checkpoint step-2 FAILED" in caplog.text and "step-1 stays valid" in caplog.text
    assert mgr.latest() == tmp_path / "checkpoints" / "step-1"
    assert not (tmp_path / "checkpoints" / "step-2").exists()
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))


def test_crash_mid_save_leaves_latest_on_the_complete_checkpoint(dist_world, tmp_path):
    engine, model = make_engine()
    mgr = ckpt_mod.CheckpointManager(tmp_path)
    train_steps(engine, 1)
    mgr.save(1, engine, model, {"epoch": 0}, {"rng": {}})
    # what a crash during the next save leaves behind: a partial temp dir, no rename, no pointer move
    partial = tmp_path / "checkpoints" / ".tmp-step-2"
    (partial / "ds").mkdir(parents=True)
    (partial / "ds" / "half.pt").write_bytes(b"\0" * 10)
    assert mgr.resolve("auto") == tmp_path / "checkpoints" / "step-1"
    with pytest.raises(ConfigError, match="no complete checkpoint"):
        mgr.resolve(str(partial))
    # the next save of that step replaces the debris
    assert mgr.save(2, engine, model, {"epoch": 0}, {"rng": {}}) is not None
    assert not partial.exists() and mgr.latest().name == "step-2"


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
    import subprocess
    import sys

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
