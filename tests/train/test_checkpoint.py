"""Checkpoints (speechlm.train.checkpoint) of a real DeepSpeed engine (world size 1, gloo) wrapping a
small stand-in module: save, load and prune; DeepSpeed's own zero_to_fp32.py on the folder; a failed
save (a real "disk full") and a crash mid-save leave the previous checkpoint the latest."""

from __future__ import annotations

import logging
import resource
import signal
import subprocess
import sys

import pytest
import torch

from speechlm.config import ConfigError
from speechlm.train import checkpoint as ckpt_mod
from standin import make_engine, train_steps, trainable


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
