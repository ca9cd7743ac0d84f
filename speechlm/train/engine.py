"""DeepSpeed setup: the process group, the ds config filled in from the training config, the engine.

One source of truth: micro batch, accumulation, clipping and bf16 live in `training.*`; the JSON in
`ds_configs/` leaves them "auto" and they are filled in here. A value the JSON sets that differs
from the training config is a ConfigError, not a silent pick of one of the two.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
from pathlib import Path

import torch

from speechlm.config import REPO_ROOT, Config, ConfigError

DS_CONFIG_DIR = REPO_ROOT / "ds_configs"
log = logging.getLogger("speechlm.train")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_launcher_env() -> None:
    """Plain `python launch/train.py` is world size 1: without these DeepSpeed falls back to MPI.

    A single process needs no agreed port, so one that has none (say, RANK/WORLD_SIZE=1 left in
    the environment by a parent process) takes a free one rather than failing at rendezvous.
    """
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("LOCAL_RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
    if os.environ["WORLD_SIZE"] == "1":
        os.environ.setdefault("LOCAL_RANK", "0")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))


def init_distributed() -> tuple[int, int, torch.device]:
    """Start the process group (NCCL on CUDA, gloo on DeepSpeed's CPU accelerator); rank, world, device."""
    default_launcher_env()
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    acc = get_accelerator()
    if acc.device_name() == "cpu":
        # DeepSpeed JIT-compiles its shared-memory comm op (~75 s) at init_distributed on CPU.
        # It only serves `inference_all_reduce`; training collectives go through gloo. Marking the
        # op incompatible (the probe result DeepSpeed caches and consults) skips the build.
        import deepspeed.ops

        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
        backend = "gloo"
    else:
        backend = acc.communication_backend_name()
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend=backend)
    rank = torch.distributed.get_rank()
    world = torch.distributed.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if acc.device_name() == "cpu":
        device = torch.device("cpu")
    else:
        acc.set_device(local_rank)
        device = torch.device(acc.device_name(), local_rank)
    return rank, world, device


def bf16_supported(device: torch.device) -> bool:
    """CUDA asks the card (T4 and V100 have no bf16); CPU runs bf16 everywhere (emulated where the core lacks it)."""
    return device.type != "cuda" or torch.cuda.is_bf16_supported()


def resolve_precision(cfg: Config, bf16_supported: bool, device_name: str) -> Config:
    """The config to train with on this device: a bf16 recipe on a card without bf16 trains in fp32.

    fp16 is not offered in its place: its loss scaling is what produces NaN/zero losses (pitfall 5).
    """
    if not cfg.training.bf16 or bf16_supported:
        return cfg
    log.warning(
        "%s has no bf16: training in fp32 instead (training.bf16=false, model.model_dtype=float32; "
        "about twice the memory of the frozen parts and slower)",
        device_name,
    )
    return dataclasses.replace(
        cfg,
        training=dataclasses.replace(cfg.training, bf16=False),
        model=dataclasses.replace(cfg.model, model_dtype="float32"),
    )


def ds_config_path(cfg: Config) -> Path:
    ds = cfg.deepspeed
    if ds.config:
        p = Path(ds.config)
        p = p if p.is_absolute() or p.exists() else REPO_ROOT / p
        if not p.is_file():
            raise ConfigError(f"deepspeed.config: file not found: {ds.config}")
        return p
    if ds.zero_stage not in (1, 2, 3):
        raise ConfigError(f"deepspeed.zero_stage: must be 1, 2 or 3, got {ds.zero_stage}")
    if ds.offload:
        if ds.zero_stage != 3:
            raise ConfigError("deepspeed.offload: CPU offload ships for ZeRO-3 only (set deepspeed.zero_stage=3)")
        return DS_CONFIG_DIR / "zero3_offload.json"
    return DS_CONFIG_DIR / f"zero{ds.zero_stage}.json"


def _fill(d: dict, key: str, value, name: str, source: str) -> None:
    """Set d[key] to the training config's value; 'auto'/missing take it, anything else must agree."""
    have = d.get(key, "auto")
    if have == "auto" or have == value:
        d[key] = value
        return
    raise ConfigError(
        f"{source}: '{name}' is {have!r} but the training config says {value!r}; "
        f'set it in one place (use "auto" in the JSON)'
    )


def build_ds_config(cfg: Config, world_size: int) -> dict:
    """The ds config dict: the shipped/user JSON with the shared values filled in from `training`."""
    path = ds_config_path(cfg)
    try:
        ds = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: not valid JSON ({e})") from None
    t = cfg.training
    src = str(path)
    if not isinstance(t.per_device_train_batch_size, int):  # a program error, not a user's
        raise RuntimeError("per_device_train_batch_size=auto must be resolved (speechlm.train.run.resolve_run) first")
    _fill(ds, "train_micro_batch_size_per_gpu", t.per_device_train_batch_size, "train_micro_batch_size_per_gpu", src)
    _fill(ds, "gradient_accumulation_steps", t.gradient_accumulation_steps, "gradient_accumulation_steps", src)
    _fill(ds, "gradient_clipping", float(t.max_grad_norm), "gradient_clipping", src)
    effective = t.per_device_train_batch_size * t.gradient_accumulation_steps * world_size
    _fill(ds, "train_batch_size", effective, "train_batch_size", src)
    bf16 = ds.setdefault("bf16", {})
    _fill(bf16, "enabled", bool(t.bf16), "bf16.enabled", src)
    if ds.get("fp16", {}).get("enabled") is True:
        raise ConfigError(f"{src}: fp16 is not supported (NaN/zero losses); use bf16 (training.bf16)")
    # DeepSpeed casts every parameter to bf16 but, by default ("auto"), puts the buffers of the modules a
    # transformers model lists in `_keep_in_fp32_modules_strict` back to fp32. Granite Speech 5 lists its conv
    # BatchNorm, which would then hold bf16 weights beside fp32 running statistics and fail at the first step.
    # The model is built in its final dtypes on purpose (speechlm.model.parts): DeepSpeed leaves buffers alone.
    _fill(ds.setdefault("data_types", {}), "keep_in_fp32_modules", [], "data_types.keep_in_fp32_modules", src)
    zero = ds.setdefault("zero_optimization", {})
    _fill(zero, "stage", cfg.deepspeed.zero_stage, "zero_optimization.stage", src)
    if "optimizer" in ds or "scheduler" in ds:
        raise ConfigError(
            f"{src}: remove 'optimizer'/'scheduler'; the trainer builds AdamW with three "
            f"parameter groups and the warmup+cosine schedule from `training`"
        )
    return ds


def build_engine(model, optimizer, scheduler, ds_config: dict):
    import deepspeed

    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config, dist_init_required=False
    )
    return engine
