"""`training.per_device_train_batch_size: auto` in the trainer: resolve it for the device the run is on.

1. The plan (`speechlm.plan.auto.pick`): device memory, ZeRO stage, the longest clip in the built
   shards' manifests (length bucketing puts the longest clips in one batch, so that batch happens).
   Device memory: the CUDA device's total, or `SPEECHLM_DEVICE_MEMORY_GIB` when set (a share of a
   GPU, or the memory to plan for on a CPU-only machine, where it is required).
2. On CUDA, once the model is built and before the engine: one forward/backward of that worst-case
   batch, with DeepSpeed's optimizer states reserved; on OOM the micro batch halves (to a divisor
   of clips per step) and the accumulation doubles. Ranks agree on the smallest. (Not under ZeRO-3,
   whose partitioned weights a probe before the engine cannot represent.)
3. A resumed run keeps the micro batch, accumulation and checkpointing its checkpoint recorded: the
   data order depends on the micro batch, and a probe may land differently on another start.
Each step returns a value and changes nothing: the pick goes into the run's resolved settings
(speechlm.train.run), whose config is what config.yaml and checkpoints record. What was picked and
why is logged.
"""

from __future__ import annotations

import dataclasses
import logging
import math

import torch

from speechlm.audio_checks import SAMPLE_RATE
from speechlm.config import Config, ConfigError
from speechlm.data import Collator
from speechlm.plan.auto import ENV, BatchPick, device_memory_gib, divisors_down, pick, step_bytes, target_clips  # noqa: F401
from speechlm.plan.disk import data_facts
from speechlm.plan.memory import TEXT_TOKENS_PER_SECOND, worst_clip_seconds, zero_memory
from speechlm.plan.models import model_shapes

log = logging.getLogger("speechlm.train")

WORDS = "the quick brown fox jumps over the lazy dog".split()


def applied(cfg: Config, p: BatchPick) -> Config:
    """`cfg` with the pick's micro batch, accumulation and checkpointing: a new Config, `cfg` untouched."""
    t = dataclasses.replace(
        cfg.training,
        per_device_train_batch_size=p.micro,
        gradient_accumulation_steps=p.accumulation,
        gradient_checkpointing=p.gradient_checkpointing,
    )
    return dataclasses.replace(cfg, training=t)


def decide(
    cfg: Config, world: int, recorded: dict | None, device_memory: tuple[float, str] | None = None, family=None
) -> BatchPick | None:
    """Steps 1 and 3: the pick for `cfg` (None: a number was given; `cfg` is not changed). `recorded`:
    the resumed checkpoint's training values (with its "path"), or None; `device_memory` as
    `device_memory_gib()` gives it (asked when None); `family`: the run's encoder family, when resolved.
    The pick carries the planner's shapes it was made from, for the probe (built once per run)."""
    t = cfg.training
    if t.per_device_train_batch_size != "auto":
        return None
    target = target_clips(cfg)
    rec = recorded
    if (
        rec
        and isinstance(rec.get("per_device_train_batch_size"), int)
        and rec["per_device_train_batch_size"] * rec.get("gradient_accumulation_steps", 1) == target
    ):
        p = BatchPick(
            rec["per_device_train_batch_size"],
            rec["gradient_accumulation_steps"],
            bool(rec.get("gradient_checkpointing")),
            device_gib=float("nan"),
            worst_clip_seconds=float("nan"),
            peak_bytes=float("nan"),
            reason=f"as recorded by the checkpoint resumed ({rec['path']})",
        )
        log.warning("per_device_train_batch_size=auto: %s", p.describe())
        return p
    gib, source = device_memory or device_memory_gib()
    clip = worst_clip_seconds(cfg, data_facts(cfg))
    shapes = model_shapes(cfg, family)
    p = dataclasses.replace(pick(cfg, shapes, gib, world=world, clip_seconds=clip), shapes=shapes)
    log.warning(
        "per_device_train_batch_size=auto for %s (%.1f GiB, ZeRO-%d, world %d), %d clips per step: %s",
        source,
        gib,
        cfg.deepspeed.zero_stage,
        world,
        target,
        p.describe(),
    )
    return p


def worst_batch(cfg: Config, model, micro: int, clip_seconds: float) -> dict:
    """`micro` clips of the longest length with transcripts as long as the plan assumes, collated."""
    words = math.ceil(clip_seconds * TEXT_TOKENS_PER_SECOND)
    sentence = " ".join(WORDS[i % len(WORDS)] for i in range(words))
    rng = torch.Generator().manual_seed(0)
    audio = (0.1 * torch.randn(int(clip_seconds * SAMPLE_RATE), generator=rng)).numpy()
    collate = Collator.from_config(cfg, model.tokenizer, family=model.family)
    return collate([{"audio": audio, "text": sentence, "id": f"auto-batch-{i}"} for i in range(micro)])


def probe(cfg: Config, model, p: BatchPick, device: torch.device, world: int) -> BatchPick:
    """Step 2: run the worst case once on the device; halve the micro batch on OOM. CUDA only.
    Returns the pick that ran, with its measured peak: a new value (`p` and `cfg` are not changed)."""
    if not _probe_applies(cfg, p, device):
        return p
    target = target_clips(cfg)
    shapes = p.shapes if p.shapes is not None else model_shapes(cfg, model.family)
    reserve = optimizer_state_bytes(cfg, world, shapes)
    model.to(device).train()
    micro = p.micro
    while (peak := _run_worst_case(cfg, model, micro, p.worst_clip_seconds, reserve, device)) is None:
        micro = _halved(target, micro, p.worst_clip_seconds, device)
    micro = _smallest_over_ranks(micro, device, world)
    torch.cuda.reset_peak_memory_stats(device)
    if micro != p.micro:
        planned = step_bytes(
            cfg, shapes, micro, p.gradient_checkpointing, world=world, clip_seconds=p.worst_clip_seconds
        )
        p = dataclasses.replace(
            p,
            micro=micro,
            accumulation=target // micro,
            peak_bytes=planned,
            reason=f"{p.reason}; halved to {micro} after running out of memory in the probe",
        )
    p = dataclasses.replace(p, probe_peak_bytes=float(peak))  # of this rank's last successful try
    log.warning(
        "per_device_train_batch_size=auto: the worst case (%d clips of %.1f s) ran on %s, peak %.1f GiB "
        "(plan %.1f GiB): %s",
        micro,
        p.worst_clip_seconds,
        device,
        peak / 2**30,
        p.peak_bytes / 2**30,
        p.describe(),
    )
    return p


def _probe_applies(cfg: Config, p: BatchPick, device: torch.device) -> bool:
    if device.type != "cuda" or p.device_gib != p.device_gib:  # no CUDA, or values from a checkpoint
        return False
    if cfg.deepspeed.zero_stage == 3:  # the probe holds every weight; ZeRO-3 will hold 1/N of them
        log.warning(
            "per_device_train_batch_size=auto: no probe under ZeRO-3 (it would hold all the weights "
            "the engine partitions); the plan's pick stands: %s",
            p.describe(),
        )
        return False
    return True


def optimizer_state_bytes(cfg: Config, world: int, shapes) -> float:
    """What DeepSpeed's optimizer states will take on each device (the probe reserves it first), from the
    planner's `shapes` (speechlm.plan.models.Shapes)."""
    return zero_memory(
        shapes.frozen_params,
        shapes.trainable_params,
        stage=cfg.deepspeed.zero_stage,
        world=world,
        offload=cfg.deepspeed.offload,
    )["optimizer_states"]


def _run_worst_case(
    cfg: Config, model, micro: int, clip_seconds: float, reserve_bytes: float, device: torch.device
) -> int | None:
    """One forward/backward of `micro` worst-case clips beside the reserve: its peak bytes, None on OOM."""
    reserve = batch = None
    torch.cuda.reset_peak_memory_stats(device)
    try:
        reserve = torch.empty(int(reserve_bytes), dtype=torch.uint8, device=device)  # DeepSpeed's, later
        batch = worst_batch(cfg, model, micro, clip_seconds)
        batch = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in batch.items()}
        model(**batch).loss.backward()
        return torch.cuda.max_memory_allocated(device)
    except torch.OutOfMemoryError:
        return None
    finally:  # nothing of this try may stay on the device: not the batch, the grads or the reserve
        reserve = batch = None  # noqa: F841
        model.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()


def _halved(target: int, micro: int, clip_seconds: float, device: torch.device) -> int:
    """The next micro batch to try after `micro` ran out of memory: a divisor of `target` at most half."""
    smaller = divisors_down(target, micro // 2)
    if not smaller:
        raise ConfigError(
            f"training.per_device_train_batch_size=auto: 1 clip of {clip_seconds:.1f} s "
            f"runs out of memory on {device}; raise deepspeed.zero_stage or use a larger device"
        )
    log.warning(
        "per_device_train_batch_size=auto: micro batch %d ran out of memory on the worst case; trying %d",
        micro,
        smaller[0],
    )
    return smaller[0]


def _smallest_over_ranks(micro: int, device: torch.device, world: int) -> int:
    """Every rank runs the same micro batch: the smallest any of them managed."""
    if world == 1:
        return micro
    import torch.distributed as dist  # only with a process group

    t = torch.tensor([micro], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())
