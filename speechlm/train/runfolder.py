"""A run folder is never overwritten by accident.

Starting a run (no `training.resume_from_checkpoint`) in a folder that holds a run's checkpoints either
resumes it, when the config that defines the run is the same (a re-run of the same command carries on,
or finds it finished), or stops with a ConfigError that names what differs and offers
`training.resume_from_checkpoint`, a new `training.run_name`, or `speechlm train --overwrite`. A folder
with a `final/` model but no checkpoint stops the same way. Leftover logs of a run that died before its
first checkpoint are cleared, so that `metrics.jsonl` holds one history.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from speechlm import config as config_mod
from speechlm.config import Config, ConfigError
from speechlm.runs import checkpoint_at
from speechlm.train.checkpoint import CheckpointManager

log = logging.getLogger("speechlm.train")

# what defines a run: a config that differs in any of these is another run. Left out: what the run
# decides for the device (precision, auto batch), and what a re-run may change without making it
# another run (logging, eval and save cadence, the hub, resume itself).
SAME_RUN = {
    "model": None,  # every key
    "data": ("train", "eval", "batching", "batch_seconds", "augment"),
    "training": (
        "seed",
        "learning_rate",
        "decoder_learning_rate",
        "encoder_learning_rate",
        "projector_weight_decay",
        "weight_decay",
        "warmup_steps",
        "lr_scheduler_type",
        "clips_per_step_per_device",
        "num_train_epochs",
        "max_steps",
        "freeze_audio_encoder",
        "freeze_language_model",
        "freeze_text_embed_tokens",
        "freeze_projector",
        "use_lora",
        "ctc_warmup_steps",
        "ctc_weight",
        "loss",
    ),
}
LOGS = ("metrics.jsonl", "clips.rank*.jsonl")
SKIP_MODEL = ("model_dtype",)  # resolved for the device


def differences(saved: dict, cfg: Config) -> list[str]:
    """`key: saved -> now` for each key that defines a run and differs."""
    now, out = config_mod.to_dict(cfg), []
    for section, keys in SAME_RUN.items():
        a, b = saved.get(section, {}), now.get(section, {})
        for k in keys or sorted(set(a) | set(b)):
            if section == "model" and k in SKIP_MODEL:
                continue
            if a.get(k) != b.get(k):
                out.append(f"{section}.{k}: {_short(a.get(k))} -> {_short(b.get(k))}")
    return out


def _short(v) -> str:
    s = repr(v)
    return s if len(s) <= 80 else s[:77] + "..."


def claim(cfg: Config, run_dir: Path, overwrite: bool = False, rank: int = 0) -> str | None:
    """The `resume_from_checkpoint` this run starts with in `run_dir`: as configured, `auto` to carry
    on a run of the same config, or None (fresh); raises ConfigError for another run's folder.
    With `overwrite`, rank 0 empties the folder first (the caller keeps ranks in step)."""
    spec = cfg.training.resume_from_checkpoint
    if overwrite:
        if rank == 0:
            _empty(run_dir)
        return spec
    if spec:
        return spec
    step = checkpoint_at(run_dir)
    final = run_dir / "final"
    if step is None and not final.exists():
        if rank == 0:
            _clear_logs(run_dir)
        return None
    if step is not None:
        state = CheckpointManager.read_state(step)
        diff = differences(state.get("config", {}), cfg)
        if not diff:
            log.warning(
                "%s holds this run (same config) up to step %d: resuming it (training.resume_from_checkpoint=auto); "
                "--overwrite starts over",
                run_dir,
                state["step"],
            )
            return "auto"
        what = f"a run with checkpoints up to step {state['step']} and another config ({'; '.join(diff[:4])})"
    else:
        what = "a finished model (final/) and no checkpoint to resume"
    raise ConfigError(
        f"training.run_name: {run_dir} holds {what}. Resume it with training.resume_from_checkpoint=auto, start a "
        "new run with training.run_name=NEW_NAME, or start over in this folder with `speechlm train --overwrite` "
        "(deletes its checkpoints, final/, eval/ and logs)"
    )


def _empty(run_dir: Path) -> None:
    if not run_dir.is_dir() or not any(run_dir.iterdir()):
        return
    log.warning("--overwrite: emptying %s", run_dir)
    for p in run_dir.iterdir():
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()


def _clear_logs(run_dir: Path) -> None:
    """Logs of a run that stopped before its first checkpoint: this run starts the history again."""
    stale = [p for pattern in LOGS for p in run_dir.glob(pattern)]
    if stale:
        log.warning("%s: no checkpoint to resume; starting over (its earlier logs are cleared)", run_dir)
    for p in stale:
        p.unlink()


def warn_if_other_data(saved: dict, cfg: Config, path, step: int) -> bool:
    """A resume whose train or eval sets differ from the checkpoint's carries on its optimizer, schedule
    and step on other data: say so, and how to fine-tune instead. True when it warned."""
    now = config_mod.to_dict(cfg)["data"]
    changed = [k for k in ("train", "eval") if saved.get("data", {}).get(k) != now.get(k)]
    if not changed:
        return False
    log.warning(
        "resuming %s on other data (data.%s changed): its optimizer state, LR schedule and step %d carry on, so "
        "the new data gets only the rest of the old schedule. To fine-tune the trained model on new data with a "
        "fresh optimizer and schedule, start a new run with model.init_from=%s",
        path,
        " and data.".join(changed),
        step,
        path,
    )
    return True
