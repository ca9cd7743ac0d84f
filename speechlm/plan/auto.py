"""`training.per_device_train_batch_size: auto` by the plan: micro batch x accumulation for a device.

The recipe fixes how many clips one optimizer step sees per device
(`training.clips_per_step_per_device`, 256 in production); the device decides how they are split.
The pick is the largest micro batch (a divisor of that number) whose worst case -- every clip as
long as the longest one the data holds -- fits the device's memory by the planner, with ZeRO's
per-device share of weights, gradients and optimizer states.

Gradient checkpointing costs one more forward of the decoder layers (~a third more compute), so
it is turned on only where it pays: when without it the micro batch stays below EFFICIENT_TOKENS
worst-case tokens (too small to keep a GPU busy) and with it a larger micro batch fits. A recipe
that asks for checkpointing keeps it.

On CUDA the trainer then runs the picked batch once (speechlm.train.autobatch) and halves it on OOM.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field

import torch

from speechlm.config import Config, ConfigError
from speechlm.plan.memory import GIB, USABLE_FRACTION, clip_tokens, step_memory

ENV = "SPEECHLM_DEVICE_MEMORY_GIB"
EFFICIENT_TOKENS = 8192  # worst-case tokens per micro batch from which checkpointing is not worth it


@dataclass(frozen=True)
class BatchPick:
    micro: int
    accumulation: int
    gradient_checkpointing: bool
    device_gib: float
    worst_clip_seconds: float
    peak_bytes: float  # the planner's worst-case step at this pick
    reason: str
    probe_peak_bytes: float | None = None  # CUDA: the worst case's measured peak (speechlm.train.autobatch)
    # the planner's shapes this pick was made from (speechlm.plan.models.Shapes): computed once per run,
    # and the CUDA probe plans with them again (None: the pick was recorded by a resumed checkpoint)
    shapes: object = field(default=None, repr=False, compare=False)

    def describe(self) -> str:
        return (
            f"micro batch {self.micro} x accumulation {self.accumulation}, gradient checkpointing "
            f"{'on' if self.gradient_checkpointing else 'off'}: {self.reason}"
        )


def device_memory_gib() -> tuple[float, str]:
    """(GiB to plan for, where that number came from): SPEECHLM_DEVICE_MEMORY_GIB, else the CUDA card's."""
    stated = os.environ.get(ENV)
    if stated:
        try:
            gib = float(stated)
        except ValueError:
            gib = 0.0
        if not gib > 0:
            raise ConfigError(f"{ENV}: expected the device memory in GiB (a number > 0), got {stated!r}")
        return gib, f"{ENV}={stated}"
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(int(os.environ.get("LOCAL_RANK", "0")))
        return props.total_memory / 2**30, props.name
    raise ConfigError(
        f"training.per_device_train_batch_size=auto: no CUDA device to size the batch for; "
        f"state the memory to plan for ({ENV}=GiB) or give a number"
    )


def target_clips(cfg: Config) -> int:
    """Clips per optimizer step per device that the run keeps."""
    t = cfg.training
    if t.per_device_train_batch_size == "auto":
        return t.clips_per_step_per_device
    return t.per_device_train_batch_size * t.gradient_accumulation_steps


def divisors_down(n: int, start: int | None = None) -> list[int]:
    """Divisors of n from `start` (default n) down to 1: the micro batches that keep n per step."""
    top = n if start is None else min(start, n)
    return [b for b in range(top, 0, -1) if n % b == 0]


def _with(cfg: Config, micro: int, checkpointing: bool) -> Config:
    c = copy.deepcopy(cfg)
    c.training.per_device_train_batch_size = micro
    c.training.gradient_accumulation_steps = 1
    c.training.gradient_checkpointing = checkpointing
    return c


def step_bytes(cfg: Config, shapes, micro: int, checkpointing: bool, *, world: int, clip_seconds: float) -> float:
    return step_memory(_with(cfg, micro, checkpointing), shapes, batch=micro, world=world, clip_seconds=clip_seconds)[
        "total"
    ]


def largest_fit(cfg: Config, shapes, budget: float, checkpointing: bool, *, world: int, clip_seconds: float):
    """(micro batch, its planned bytes) of the largest divisor that fits `budget`, or None."""
    for b in divisors_down(target_clips(cfg)):
        need = step_bytes(cfg, shapes, b, checkpointing, world=world, clip_seconds=clip_seconds)
        if need <= budget:
            return b, need
    return None


def pick(cfg: Config, shapes, device_gib: float, *, world: int, clip_seconds: float) -> BatchPick:
    """The auto batch for a device of `device_gib` (see the module docstring); ConfigError if none fits."""
    target = target_clips(cfg)
    budget = device_gib * GIB * USABLE_FRACTION
    tokens = clip_tokens(cfg, clip_seconds, shapes.family)[0]
    common = dict(device_gib=device_gib, worst_clip_seconds=clip_seconds)
    on = largest_fit(cfg, shapes, budget, True, world=world, clip_seconds=clip_seconds)
    if cfg.training.gradient_checkpointing:
        off, why_on = None, "as the recipe asks"
    else:
        off = largest_fit(cfg, shapes, budget, False, world=world, clip_seconds=clip_seconds)
        why_on = None
    fits = f"fits {USABLE_FRACTION:.0%} of {device_gib:g} GiB by the plan (clips up to {clip_seconds:.1f} s)"
    if off and (off[0] == target or off[0] * tokens >= EFFICIENT_TOKENS or not on or on[0] <= off[0]):
        return BatchPick(
            off[0], target // off[0], False, peak_bytes=off[1], reason=f"the largest that {fits}", **common
        )
    if on:
        if why_on is None:
            why_on = (
                f"without it only {off[0]} clips ({off[0] * tokens} tokens < {EFFICIENT_TOKENS}) fit"
                if off
                else "without it not even 1 clip fits"
            )
        return BatchPick(
            on[0],
            target // on[0],
            True,
            peak_bytes=on[1],
            reason=f"the largest that {fits}; checkpointing {why_on}",
            **common,
        )
    one = step_bytes(cfg, shapes, 1, True, world=world, clip_seconds=clip_seconds)
    raise ConfigError(
        f"training.per_device_train_batch_size=auto: not even 1 clip of {clip_seconds:.1f} s fits {device_gib:g} GiB "
        f"(the plan needs {one / GIB:.1f} GiB with gradient checkpointing); raise deepspeed.zero_stage, use "
        f"deepspeed.offload=true, or a larger device"
    )
