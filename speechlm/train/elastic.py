"""Elastic resume, trainer side: a checkpoint written by N processes resumed by M.

- The optimizer: ZeRO partitions its state by rank, so N partitions cannot be loaded by M ranks.
  DeepSpeed's universal checkpoint (`deepspeed.checkpoint.ds_to_universal`) rewrites them as one
  file per parameter (fp32 weights, Adam's exp_avg / exp_avg_sq, step), which any world size loads
  (`"checkpoint": {"load_universal": true}`). Rank 0 converts once per checkpoint, into
  `step-N/universal/` (built under a temporary name, then renamed, so a kill mid-way leaves nothing
  half-made); the LR scheduler and step counters come from the same checkpoint as before.
- The batch: the effective batch (micro batch x accumulation x world) is kept by changing the
  accumulation when it divides evenly; else the run goes on with the nearest it can and says so
  in one line. The LR schedule keeps its length and position (optimizer steps).
- The data: the reader re-plans the rest of the epoch (speechlm.data.loader.TrainLoader).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import shutil
import time
from pathlib import Path

log = logging.getLogger("speechlm.train")

UNIVERSAL_DIR = "universal"


def saved_batch(state: dict) -> dict:
    """{"micro", "accumulation", "world", "configured_accumulation"} of the run that saved `state`
    (checkpoints from before elastic resume carry only the config they ran with)."""
    if "batch" in state:
        return state["batch"]
    t = state["config"]["training"]
    acc = int(t["gradient_accumulation_steps"])
    return {
        "micro": int(t["per_device_train_batch_size"]),
        "accumulation": acc,
        "world": int(state["world_size"]),
        "configured_accumulation": acc,
    }


def fit_accumulation(t, state: dict, world: int) -> tuple[int, str | None]:
    """The accumulation that keeps the saved effective batch on `world` ranks, and the line to log
    (None: nothing to say). `t` (the training config) is read, not changed.

    Only when the user left the batch settings as they were: a micro batch or accumulation changed
    on the command line is a choice, and stands."""
    b = saved_batch(state)
    if (t.per_device_train_batch_size, t.gradient_accumulation_steps) != (b["micro"], b["configured_accumulation"]):
        return t.gradient_accumulation_steps, None
    target = b["micro"] * b["accumulation"] * b["world"]
    per_step = t.per_device_train_batch_size * world
    if target % per_step == 0:
        acc = target // per_step
        line = None
        if b["world"] != world:
            line = (
                f"elastic resume: {b['world']} -> {world} processes; gradient accumulation {b['accumulation']} -> "
                f"{acc} keeps the effective batch at {target} (micro batch {t.per_device_train_batch_size})"
            )
        elif acc != t.gradient_accumulation_steps:  # an earlier elastic resume changed it: keep it so
            line = f"resume: gradient accumulation {acc}, as the checkpoint ran, keeps the effective batch at {target}"
        return acc, line
    acc = max(1, round(target / per_step))  # the nearest effective batch this world can make
    return acc, (
        f"elastic resume: {b['world']} -> {world} processes; the effective batch {target} is not a multiple of "
        f"{world} x micro batch {t.per_device_train_batch_size}, so it becomes {per_step * acc} (accumulation "
        f"{acc}); the learning-rate schedule is unchanged"
    )


def convert(ds_dir: Path, tag: str, out: Path) -> float:
    """ds_to_universal of `ds_dir/tag` into `out/tag`, atomically; returns the seconds it took."""
    from deepspeed.checkpoint import ds_to_universal

    tmp = out.with_name(f".tmp-{out.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    workers = max(1, min(8, (os.cpu_count() or 2) // 2))
    args = argparse.Namespace(
        input_folder=str(ds_dir / tag),
        output_folder=str(tmp / tag),
        num_extract_workers=workers,
        num_merge_workers=max(1, workers // 2),
        keep_temp_folder=False,
        strict=True,
        # our checkpoints carry no Megatron-style universal_checkpoint_info
        inject_missing_state=True,
    )
    t0 = time.monotonic()
    chatter = io.StringIO()  # the converter prints its progress: keep it for an error, not the log
    try:
        with contextlib.redirect_stdout(chatter):
            ds_to_universal.main(args)
    except Exception as e:
        raise RuntimeError(
            f"DeepSpeed's universal conversion of {ds_dir / tag} failed: {e!r}\n{chatter.getvalue()[-2000:]}"
        ) from e
    os.rename(tmp, out)
    return time.monotonic() - t0


def group_settings(optimizer) -> list[dict]:
    return [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]


def repair_after_universal_load(optimizer, settings: list[dict], last_lrs: list[float]) -> None:
    """Two things DeepSpeed 0.19's universal load gets wrong under ZeRO-3 (`optimizer` is the ZeRO
    optimizer; its `.optimizer` the torch AdamW):
    - every parameter group gets the settings of group 0 (lr, weight decay, name), while the
      projector's and the LoRA/decoder groups differ: this run's settings go back, with the lr the
      scheduler had reached;
    - every sub-group's Adam `step` is the SAME tensor object, which torch's AdamW increments in
      place once per sub-group: after one update a checkpoint at step 8 stood at 14, and the bias
      correction was wrong (found by the first-update test). Each state gets its own copy."""
    for g, s, lr in zip(optimizer.param_groups, settings, last_lrs):
        g.update(s)
        g["lr"] = lr
    import torch

    for state in getattr(optimizer, "optimizer", optimizer).state.values():
        if torch.is_tensor(state.get("step")):
            state["step"] = state["step"].clone()
