"""One optimizer step's figures: the per-rank stats the loop sums over micro batches and ranks, the
metrics row logged from them, and the report of a step whose loss or gradient was not finite."""

from __future__ import annotations

import logging
import math

import torch
import torch.distributed as dist

from speechlm.train.metrics import Metrics

log = logging.getLogger("speechlm.train")

# the stats vector, summed over a step's micro batches and then over ranks:
# loss (of the finite micro batches), micro batches, non-finite micro batches, tokens, clips, audio seconds
LOSS, MICRO, NONFINITE, TOKENS, CLIPS, AUDIO = range(6)


def zeros() -> torch.Tensor:
    return torch.zeros(6, dtype=torch.float64)


def micro_row(loss: float, tokens: float, clips: int, audio_seconds: float) -> torch.Tensor:
    """One micro batch's stats; a non-finite loss is counted as such and adds nothing to the loss."""
    finite = math.isfinite(loss)
    row = [loss if finite else 0.0, 1, 0 if finite else 1, tokens, clips, audio_seconds]
    return torch.tensor(row, dtype=torch.float64)


def reduce(stats: torch.Tensor, signum: int, world: int) -> int:
    """Sums `stats` over ranks (in place); the largest stop signal pending on any rank (0: none)."""
    sig = torch.tensor([signum], dtype=torch.long)
    if world > 1:
        dist.all_reduce(stats)
        dist.all_reduce(sig, op=dist.ReduceOp.MAX)
    return int(sig.item())


def figures(stats: torch.Tensor, dt: float, grad_norm, param_groups, epoch: int, applied: bool) -> dict:
    """The metrics row of a step from its summed stats: mean loss over the finite micro batches, the
    grad norm (nan when the step was skipped), the learning rates (`train/learning_rate` is the
    projector group's, else the first group's) and the throughputs. The loop adds the peak memory
    on the steps it logs."""
    loss = float(stats[LOSS]) / max(1.0, float(stats[MICRO] - stats[NONFINITE]))
    grad_norm = float(grad_norm) if applied and grad_norm is not None else float("nan")
    lrs = {f"train/learning_rate/{g.get('name', i)}": g["lr"] for i, g in enumerate(param_groups)}
    lr = next((g["lr"] for g in param_groups if g.get("name") == "projector"), param_groups[0]["lr"])
    return {
        "train/loss": loss,
        "train/grad_norm": grad_norm,
        "train/learning_rate": lr,
        **lrs,
        "train/epoch": epoch,
        "train/step_applied": applied,
        "perf/step_time_s": dt,
        "perf/samples_per_s": float(stats[CLIPS]) / dt,
        "perf/audio_seconds_per_s": float(stats[AUDIO]) / dt,
        "perf/tokens_per_s": float(stats[TOKENS]) / dt,
    }


def report_nonfinite(metrics: Metrics, step: int, ids: list[str], count: int, world: int) -> None:
    """Every rank's clips of a non-finite step, in the log and in metrics.jsonl (collective)."""
    every = [None] * world
    if world > 1:
        dist.all_gather_object(every, ids)
    else:
        every = [ids]
    clips = [i for r in every for i in r]
    log.warning(
        "step %d: non-finite loss or gradient; update skipped (%d in a row); clips: %s", step, count, ", ".join(clips)
    )
    metrics.log(step, {"train/nonfinite_step": 1, "train/nonfinite_clips": clips})
