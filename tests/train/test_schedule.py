"""The learning-rate schedule with a CTC warm start: a phase each (speechlm.train.optim)."""

from __future__ import annotations

import pytest
import torch

from speechlm import config as config_mod
from speechlm.config import Config
from speechlm.train import optim


def test_ctc_warm_start_gets_its_own_schedule_and_the_lm_phase_starts_afresh():
    t = config_mod.load(
        Config,
        "production",
        None,
        ["training.per_device_train_batch_size=8", "training.warmup_steps=10", "training.ctc_warmup_steps=40"],
    ).training
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
    sched = optim.build_scheduler(opt, t, total_steps=100)
    seen = []
    for _ in range(101):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    # CTC phase: warm up over 10, then hold the peak to its end (the projector goes on learning after)
    assert seen[5] == pytest.approx(0.5e-3) and seen[10] == seen[39] == pytest.approx(1e-3)
    assert seen[40] == pytest.approx(0.0, abs=1e-15)
    # LM phase: the same warm-up again from step 40, the full peak at 50, then cosine to zero at 100
    assert seen[45] == pytest.approx(0.5e-3) and seen[50] == pytest.approx(1e-3)
    assert seen[75] == pytest.approx(0.5e-3) and seen[100] == pytest.approx(0.0, abs=1e-15)
    assert [optim.phased_lr_factor(s, 10, 40, 100) * 1e-3 for s in (5, 45, 75)] == pytest.approx(
        [seen[5], seen[45], seen[75]]
    )
