"""A run's settings, decided once: an immutable `RunSettings` that everything after set-up reads.

Resolved in stages, because some facts exist only once something is built; each stage is a pure
function of the previous value and returns a new one (nothing is edited in place, and the user's
`Config` is never changed: the resolved config is a copy made here):

1. `resolve_run(config, world, device, saved state)`, before the model: local bases by absolute path
   (so that every checkpoint finds them, speechlm.inference.bases), precision for the device (a
   bf16 recipe on a card without bf16 trains in fp32), the micro batch and accumulation
   (`per_device_train_batch_size: auto` by the plan, or as the resumed checkpoint recorded), the
   elastic re-plan of a resume on another world size (keep the effective batch; load ZeRO state
   through a universal checkpoint), the loss kernel the planner assumed. No process group, no model:
   tests call it directly.
2. `RunSettings.with_pick(pick)`, on CUDA with the model built: the auto pick after the worst-case
   probe (speechlm.train.autobatch.probe), which may have halved the micro batch.
3. `RunSettings.with_steps(batches_per_epoch)`, with the train loader built: optimizer steps per
   epoch and `total_steps` (the LR schedule's length; a resume on another world size or
   accumulation keeps the length its checkpoint ran with).

The DeepSpeed config is filled in from these settings each time it is asked for (`ds_config`).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from speechlm.config import Config, ConfigError
from speechlm.model import ids
from speechlm.model.build import make_loss
from speechlm.plan.auto import BatchPick
from speechlm.train import autobatch, elastic, optim
from speechlm.train.engine import build_ds_config, resolve_precision


@dataclass(frozen=True)
class SavedLayout:
    """What the resumed checkpoint ran with that the schedule depends on."""

    world: int
    accumulation: int
    total_steps: int | None


@dataclass(frozen=True)
class RunSettings:
    # the user's config with this run's decisions written in (precision, micro batch, accumulation,
    # checkpointing): a copy made by the resolver and never edited after; config.yaml, checkpoints,
    # the model and the loaders take it
    cfg: Config
    world: int
    auto: BatchPick | None  # what per_device_train_batch_size=auto picked (None: a number was given)
    elastic_line: str | None  # what the elastic re-plan changed, to log (None: nothing)
    configured_accumulation: int  # the accumulation before any elastic re-plan (checkpoints record it)
    load_universal: bool  # the saved ZeRO state is from another world size
    loss: str  # the configured loss and the logits memory it holds
    saved: SavedLayout | None = None  # the resumed checkpoint's layout (None: a fresh run)
    steps_per_epoch: int | None = None  # optimizer steps per epoch: stage 3 (with_steps)
    total_steps: int | None = None  # optimizer steps of the run: stage 3 (with_steps)

    @property
    def micro(self) -> int:
        return self.cfg.training.per_device_train_batch_size

    @property
    def accumulation(self) -> int:
        return self.cfg.training.gradient_accumulation_steps

    @property
    def bf16(self) -> bool:
        return self.cfg.training.bf16

    @property
    def effective_batch(self) -> int:
        return self.micro * self.accumulation * self.world

    @property
    def ds_config(self) -> dict:
        """The DeepSpeed config for these settings: a new dict on each call (DeepSpeed may edit its own)."""
        ds = build_ds_config(self.cfg, self.world)
        if self.load_universal:
            ds["checkpoint"] = {**ds.get("checkpoint", {}), "load_universal": True}
        return ds

    def with_pick(self, pick: BatchPick | None) -> RunSettings:
        """Stage 2: these settings with the auto pick the CUDA probe settled on (None: unchanged)."""
        if pick is None:
            return self
        return dataclasses.replace(self, cfg=autobatch.applied(self.cfg, pick), auto=pick)

    def with_steps(self, batches_per_epoch: int) -> RunSettings:
        """Stage 3: optimizer steps per epoch from the train loader's `batches_per_epoch` (per rank),
        and the run's total; a resume whose world size or accumulation changed keeps the schedule
        length its checkpoint ran with (optimizer steps), unless `max_steps` is given."""
        per_epoch = batches_per_epoch // self.accumulation
        if per_epoch <= 0:
            raise ConfigError(
                f"data.train: {batches_per_epoch} batches per rank per epoch is fewer "
                f"than training.gradient_accumulation_steps={self.accumulation}"
            )
        total = optim.total_steps(self.cfg.training, per_epoch)
        s = self.saved
        if (
            s is not None
            and s.total_steps is not None
            and self.cfg.training.max_steps <= 0
            and (s.world, s.accumulation) != (self.world, self.accumulation)
        ):
            total = s.total_steps
        return dataclasses.replace(self, steps_per_epoch=per_epoch, total_steps=total)


def with_training(cfg: Config, **changes) -> Config:
    """`cfg` with `training` fields changed: a new Config, `cfg` untouched."""
    return dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, **changes))


def with_local_bases_absolute(cfg: Config) -> Config:
    """`cfg` with each base that is a local folder named by its absolute path: the resolved config the
    run's checkpoints record then finds the bases from any working folder (speechlm.inference.bases)."""
    changes = {}
    for key in ("audio_model_id", "text_model_id"):
        model_id = getattr(cfg.model, key)
        if not ids.is_speechlm_id(model_id) and Path(model_id).is_dir() and not Path(model_id).is_absolute():
            changes[key] = str(Path(model_id).resolve())
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **changes)) if changes else cfg


def resolve_run(
    cfg: Config,
    *,
    world: int,
    device_name: str,
    bf16_supported: bool,
    saved: dict | None = None,
    saved_path=None,
    device_memory: tuple[float, str] | None = None,
    family=None,
) -> RunSettings:
    """Stage 1: the run's settings on `world` processes of a device (`device_name`, whether it has
    bf16), resuming `saved` (the checkpoint's trainer_state, from `saved_path`) or starting fresh.
    `device_memory`: (GiB, where from) for `per_device_train_batch_size: auto`; `family`: the run's
    encoder family (the trainer resolves it once). `cfg` is not changed."""
    resolved = resolve_precision(copy.deepcopy(cfg), bf16_supported, device_name)  # shares nothing with cfg
    resolved = with_local_bases_absolute(resolved)
    recorded = None
    if saved is not None:
        recorded = {"path": saved_path, **saved.get("config", {}).get("training", {})}
    auto = autobatch.decide(resolved, world, recorded, device_memory, family)
    if auto is not None:
        resolved = autobatch.applied(resolved, auto)
    configured = resolved.training.gradient_accumulation_steps
    line, layout = None, None
    if saved is not None:
        accumulation, line = elastic.fit_accumulation(resolved.training, saved, world)
        resolved = with_training(resolved, gradient_accumulation_steps=accumulation)
        layout = SavedLayout(saved["world_size"], elastic.saved_batch(saved)["accumulation"], saved.get("total_steps"))
    run = RunSettings(
        cfg=resolved,
        world=world,
        auto=auto,
        elastic_line=line,
        configured_accumulation=configured,
        load_universal=saved is not None and saved["world_size"] != world,
        loss=make_loss(resolved.training).name,
        saved=layout,
    )
    build_ds_config(resolved, world)  # a ds JSON contradicting the settings fails here, before any model
    return run
