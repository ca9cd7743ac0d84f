"""AdamW over the model's parameter groups, and the warmup-then-decay schedule (transformers')."""

from __future__ import annotations

import math

import torch
from torch.optim.lr_scheduler import LambdaLR
from transformers import get_scheduler

from speechlm.config import TrainingConfig


def build_optimizer(model: torch.nn.Module, t: TrainingConfig) -> torch.optim.AdamW:
    """torch AdamW (not DeepSpeed's CPU fused Adam, which JIT-compiles for ~2 min on CPU).

    Groups come from `model.parameter_groups(t)` (projector / decoder-LoRA / encoder, each with its
    own lr and weight decay); groups with no trainable parameter are dropped (a frozen encoder).
    """
    groups = []
    for g in model.parameter_groups(t):
        params = [p for p in g["params"] if p.requires_grad]
        if params:
            groups.append({**g, "params": params})
    if not groups:
        raise ValueError("no trainable parameters: everything is frozen (check training.freeze_* and use_lora)")
    seen = set()
    for g in groups:
        for p in g["params"]:
            if id(p) in seen:
                raise ValueError(f"parameter group '{g.get('name')}' repeats a parameter of another group")
            seen.add(id(p))
    missing = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in seen]
    if missing:
        raise ValueError(f"trainable parameters in no optimizer group (they would never update): {missing[:5]}")
    return torch.optim.AdamW(groups, betas=(t.adam_beta1, t.adam_beta2), eps=t.adam_epsilon)


def build_scheduler(optimizer: torch.optim.Optimizer, t: TrainingConfig, total_steps: int):
    """Linear warmup over `warmup_steps`, then cosine (or linear) to zero at `total_steps`.

    With a CTC warm start (`ctc_warmup_steps` C > 0): steps [0, C) warm up and hold the peak (the
    projector goes on learning in the LM phase, so it is not annealed), then the LM phase warms up
    again and decays over total - C. One schedule over both would hand the LM loss, which the
    adapters first see at step C, only the schedule's decaying tail.
    """
    c = t.ctc_warmup_steps
    if 0 < c < total_steps:
        kind = t.lr_scheduler_type
        return LambdaLR(optimizer, lambda s: phased_lr_factor(s, t.warmup_steps, c, total_steps, kind))
    # "constant" in our config means constant after the same warmup (transformers' constant_with_warmup)
    name = "constant_with_warmup" if t.lr_scheduler_type == "constant" else t.lr_scheduler_type
    return get_scheduler(name, optimizer, num_warmup_steps=t.warmup_steps, num_training_steps=total_steps)


def phased_lr_factor(step: int, warmup: int, ctc_steps: int, total: int, kind: str = "cosine") -> float:
    """The multiplier with a CTC phase of `ctc_steps` (warm-up, then the peak) before the LM phase."""
    if step < ctc_steps:
        return lr_factor(step, min(warmup, ctc_steps // 2), ctc_steps, "constant")
    lm_steps = total - ctc_steps
    return lr_factor(step - ctc_steps, min(warmup, lm_steps // 2), lm_steps, kind)


def lr_factor(step: int, warmup: int, total: int, kind: str = "cosine") -> float:
    """The warmup + decay multiplier written out: the phases' schedule is made of it, and tests check
    transformers' single-phase scheduler against it."""
    if step < warmup:
        return step / max(1, warmup)
    if kind == "constant":
        return 1.0
    progress = (step - warmup) / max(1, total - warmup)
    if kind == "linear":
        return max(0.0, 1.0 - progress)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def total_steps(t: TrainingConfig, steps_per_epoch: int) -> int:
    """Optimizer steps of the run: `max_steps` when set, else epochs x steps per epoch."""
    if t.max_steps and t.max_steps > 0:
        return t.max_steps
    n = math.ceil(t.num_train_epochs * steps_per_epoch)
    if n <= 0:
        raise ValueError("the run has no steps: set training.max_steps or num_train_epochs > 0 with data")
    return n
