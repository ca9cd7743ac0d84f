"""`model.init_from`: fine-tune from a trained speechlm model (a checkpoint, a run, a final or exported
folder, or a Hub id) rather than from a fresh projector.

The run's model is built from its config as always (the frozen bases by `model.audio_model_id` and
`model.text_model_id`); then the trained parts of the folder are put on: the projector, the LoRA
adapter, the embeddings and any encoder or decoder the earlier run trained. The folder's bases must be
the run's bases, and its shapes (projector, LoRA) the run's, else a ConfigError names the key. The
optimizer, the LR schedule and the data position start fresh: this is a new run, not a resume
(`training.resume_from_checkpoint` carries all three on).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from safetensors.torch import load_file

from speechlm.config import Config, ConfigError
from speechlm.model import folder as folder_mod
from speechlm.model import ids
from speechlm.model.build import trainable_parts

log = logging.getLogger("speechlm.train")

SHAPES = ("projector_hidden_dim", "projector_pool_stride", "audio_token")
LORA = ("lora_rank", "lora_alpha", "lora_target_modules")  # checked when the folder has an adapter


def source(spec: str) -> Path:
    """The model folder `spec` names (downloaded first for a Hub id); a ConfigError naming the key."""
    from speechlm.inference.load import local_model, resolve_model_dir  # -m MODEL's rules, for the same names

    try:
        local = local_model(spec)
        if local is None:
            from huggingface_hub import snapshot_download

            local = Path(snapshot_download(spec))
        return resolve_model_dir(local)
    except ConfigError as e:
        raise ConfigError(f"model.init_from: {e}") from None
    except OSError as e:  # the Hub unreachable, or no such repo
        raise ConfigError(f"model.init_from: can't fetch '{spec}': {str(e).splitlines()[0]}") from None


def check(cfg: Config) -> tuple[Path, dict]:
    """Before anything is built: the folder `model.init_from` names and its config.json, checked against
    the run's bases and shapes."""
    path = source(cfg.model.init_from)
    try:
        fcfg = folder_mod.read_config(path)
    except ValueError as e:
        raise ConfigError(f"model.init_from: {e}") from None
    for part, key, model_id in (
        ("encoder", "audio_model_id", cfg.model.audio_model_id),
        ("decoder", "text_model_id", cfg.model.text_model_id),
    ):
        ref = fcfg["bases"][part]
        if not _same_base(ref, model_id):
            raise ConfigError(
                f"model.{key}: '{model_id}', but model.init_from {path} was trained on the {part} '{ref['id']}' "
                f"(set model.{key}={ref['id']}, or start from a model of this {part})"
            )
    saved = fcfg["speechlm"]
    for key in SHAPES + (LORA if fcfg.get("lora") else ()):
        if key in saved and saved[key] != getattr(cfg.model, key):
            raise ConfigError(
                f"model.{key}: {getattr(cfg.model, key)!r}, but model.init_from {path} has {saved[key]!r} "
                f"(a fine-tune keeps the trained parts' shapes: set model.{key}={saved[key]})"
            )
    if fcfg.get("lora") and not trainable_parts(cfg.model, cfg.training)["lora"]:
        raise ConfigError(
            f"model.use_lora: false, but model.init_from {path} carries a LoRA adapter (turn LoRA on to fine-tune it)"
        )
    return path, fcfg


def _same_base(ref: dict, model_id: str) -> bool:
    """Whether a folder's recorded base is the run's: the same Hub or speechlm id, or a local folder
    with the same weights (by their sha256)."""
    if ref["source"] == "local":
        if not Path(model_id).is_dir():
            return False
        from speechlm.model.folder.io import _sha256  # the hash the folder recorded, cached per process

        return _sha256(model_id) == ref["sha256"]
    if Path(model_id).is_dir() and not ids.is_speechlm_id(model_id):
        return False
    return ref["id"] == model_id


def load_into(model, path: Path, fcfg: dict) -> dict:
    """Put the folder's trained parts on a freshly built model (before the engine exists); returns the
    exact (fp32) values of its trainable parameters, for `set_masters` once the engine exists."""
    trained = fcfg.get("trainable", {})
    weights = load_file(str(path / folder_mod.WEIGHTS))
    proj = {k.removeprefix("projector."): v for k, v in weights.items() if k.startswith("projector.")}
    model.projector.load_state_dict(proj)  # strict: a shape check the config check may have missed
    model.calibration = fcfg.get("calibration")
    loaded = ["projector"]
    if "embed_tokens.weight" in weights:
        with torch.no_grad():
            model._base_lm().get_input_embeddings().weight.copy_(weights["embed_tokens.weight"])
        loaded.append("embeddings")
    if fcfg.get("lora"):
        _load_adapter(model, path / folder_mod.ADAPTER)
        loaded.append("LoRA")
    if trained.get("encoder"):
        _load_module(model.encoder, path / "encoder", "encoder")
        loaded.append("encoder")
    if trained.get("decoder"):
        _load_module(model._base_lm(), path / "decoder", "decoder", ignore=("lm_head.weight",))
        loaded.append("decoder")
    log.warning(
        "model.init_from %s: %s loaded; the optimizer, LR schedule and data position start fresh",
        path,
        ", ".join(loaded),
    )
    return {n: p.detach().float().clone() for n, p in model.named_parameters() if p.requires_grad}


def set_masters(model, exact: dict) -> None:
    """In DeepSpeed's bf16 mode the engine made the optimizer's fp32 masters from the module's bf16
    copies, which rounds the loaded values to bf16: the masters get the exact values back (the bf16
    copies the forward uses are those values rounded, as after any optimizer step)."""
    from deepspeed.utils import safe_set_full_fp32_param

    for name, p in model.named_parameters():
        if name in exact and (hasattr(p, "_hp_mapping") or hasattr(p, "_z3_optimizer")):
            safe_set_full_fp32_param(p, exact[name].to(p.device))


def _load_adapter(model, adapter: Path) -> None:
    from peft import set_peft_model_state_dict

    state = load_file(str(adapter / "adapter_model.safetensors"))
    result = set_peft_model_state_dict(model.decoder, state)
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    missing = [k for k in getattr(result, "missing_keys", []) or [] if "lora_" in k]
    if unexpected or missing:
        raise ConfigError(
            f"model.init_from: the adapter in {adapter} does not fit this run's LoRA "
            f"({len(missing)} missing, {len(unexpected)} unexpected: {(missing + unexpected)[:3]})"
        )


def _load_module(module, where: Path, part: str, ignore: tuple = ()) -> None:
    state = {}
    for f in sorted(where.glob("*.safetensors")):
        state.update(load_file(str(f)))
    result = module.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if k not in ignore]
    if missing or result.unexpected_keys:
        raise ConfigError(
            f"model.init_from: the trained {part} in {where} does not fit this run's {part} "
            f"(missing {missing[:3]}, unexpected {list(result.unexpected_keys)[:3]})"
        )
