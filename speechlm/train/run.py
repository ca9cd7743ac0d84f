"""A run's settings, resolved in one pure function: `resolve_run(config, world, device, saved state)`.

Everything the trainer decides before it builds anything big, in the order it depends on itself:
precision for the device (a bf16 recipe on a card without bf16 trains in fp32), the micro batch
and accumulation (`per_device_train_batch_size: auto` by the plan, or as the resumed checkpoint
recorded), the elastic re-plan of a resume on another world size (keep the effective batch; load
ZeRO state through a universal checkpoint), the DeepSpeed config filled in from all of that, and
the loss kernel the planner assumed. No process group, no model: tests call it directly.

On CUDA the auto pick is then tried once on the built model (speechlm.train.autobatch.probe);
`RunSettings.with_pick` re-resolves the DeepSpeed config for what the probe settled on.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from speechlm.config import Config
from speechlm.model.build import make_loss
from speechlm.plan.auto import BatchPick
from speechlm.train import autobatch, elastic
from speechlm.train.engine import build_ds_config, resolve_precision


@dataclass
class RunSettings:
    cfg: Config  # resolved: precision, micro batch, accumulation, checkpointing
    world: int
    ds_config: dict
    auto: BatchPick | None  # what per_device_train_batch_size=auto picked (None: a number was given)
    elastic_line: str | None  # what the elastic re-plan changed, to log (None: nothing)
    configured_accumulation: int  # the accumulation before any elastic re-plan (checkpoints record it)
    load_universal: bool  # the saved ZeRO state is from another world size
    loss: str  # the configured loss and the logits memory it holds

    @property
    def effective_batch(self) -> int:
        t = self.cfg.training
        return t.per_device_train_batch_size * t.gradient_accumulation_steps * self.world

    def with_pick(self, pick: BatchPick | None) -> RunSettings:
        """These settings after the CUDA probe changed the auto pick (autobatch.probe applies it to cfg)."""
        if pick is None:
            return self
        ds = _ds_config(self.cfg, self.world, self.load_universal)
        return RunSettings(
            self.cfg,
            self.world,
            ds,
            pick,
            self.elastic_line,
            self.configured_accumulation,
            self.load_universal,
            self.loss,
        )


def _ds_config(cfg: Config, world: int, load_universal: bool) -> dict:
    ds = build_ds_config(cfg, world)
    if load_universal:
        ds["checkpoint"] = {**ds.get("checkpoint", {}), "load_universal": True}
    return ds


def resolve_run(
    cfg: Config,
    *,
    world: int,
    device_name: str,
    bf16_supported: bool,
    saved: dict | None = None,
    saved_path=None,
    device_memory: tuple[float, str] | None = None,
) -> RunSettings:
    """The run's settings on `world` processes of a device (`device_name`, whether it has bf16),
    resuming `saved` (the checkpoint's trainer_state, from `saved_path`) or starting fresh.
    `device_memory`: (GiB, where from) for `per_device_train_batch_size: auto`. `cfg` is not changed."""
    cfg = copy.deepcopy(resolve_precision(cfg, bf16_supported, device_name))
    t = cfg.training
    recorded = None
    if saved is not None:
        recorded = {"path": saved_path, **saved.get("config", {}).get("training", {})}
    auto = autobatch.decide(cfg, world, recorded, device_memory)
    configured = t.gradient_accumulation_steps
    line = elastic.fit_accumulation(t, saved, world) if saved is not None else None
    universal = saved is not None and saved["world_size"] != world
    loss = make_loss(t)
    return RunSettings(cfg, world, _ds_config(cfg, world, universal), auto, line, configured, universal, loss.name)
