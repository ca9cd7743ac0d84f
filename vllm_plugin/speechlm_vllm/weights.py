"""The decoder's weights for vLLM's own decoder class: the folder's decoder/ with its LoRA adapter merged
in, streamed tensor by tensor.

The adapter is a plain peft adapter of the unmodified base (speechlm.model.folder). Merging follows
peft's `merge_and_unload`: W + scale * (B @ A) computed in float32 and cast back to W's dtype, with
scale = lora_alpha / r (/ sqrt(r) with rsLoRA), which is what `speechlm export --merge-lora` writes; a
folder written with --merge-lora has no adapter and streams as it is.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import safe_open

PEFT_PREFIX = "base_model.model."
UNSUPPORTED = ("use_dora", "modules_to_save", "rank_pattern", "alpha_pattern", "layer_replication", "lora_bias")


def _tensors(folder: Path) -> Iterator[tuple[str, torch.Tensor]]:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{folder}: no *.safetensors weights")
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


def lora_deltas(adapter: Path) -> tuple[dict[str, tuple[torch.Tensor, torch.Tensor]], float]:
    """{weight name in the base: (A, B)} and the scale of a peft LoRA adapter folder."""
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    bad = [k for k in UNSUPPORTED if cfg.get(k)]
    if bad or cfg.get("fan_in_fan_out"):
        raise ValueError(f"{adapter}: LoRA settings the merge does not support: {bad or ['fan_in_fan_out']}")
    r, alpha = int(cfg["r"]), float(cfg["lora_alpha"])
    scale = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for name, t in _tensors(adapter):
        base = name.removeprefix(PEFT_PREFIX)
        for part in ("lora_A", "lora_B"):
            if f".{part}." in base:
                module = base.split(f".{part}.")[0]
                pairs.setdefault(module + ".weight", {})[part] = t
                break
        else:
            raise ValueError(f"{adapter}: tensor {name} is not a LoRA A/B weight (trained embeddings or heads?)")
    incomplete = [k for k, v in pairs.items() if len(v) != 2]
    if incomplete:
        raise ValueError(f"{adapter}: LoRA weights without their pair: {incomplete[:3]}")
    return {k: (v["lora_A"], v["lora_B"]) for k, v in pairs.items()}, scale


def merged(weight: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scale: float) -> torch.Tensor:
    return (weight.float() + (b.float() @ a.float()) * scale).to(weight.dtype)


def decoder_weights(decoder: Path, adapter: Path | None, embed_tokens: torch.Tensor | None):
    """(name, tensor) of the decoder folder, LoRA merged where the adapter has a pair; `embed_tokens`: the
    folder's trained input embeddings, which replace the base's (speechlm.model.folder)."""
    deltas, scale = lora_deltas(adapter) if adapter is not None else ({}, 1.0)
    used = set()
    for name, t in _tensors(decoder):
        if name in deltas:
            t = merged(t, *deltas[name], scale)
            used.add(name)
        if embed_tokens is not None and name.endswith("embed_tokens.weight"):
            t = embed_tokens.to(t.dtype)
        yield name, t
    missing = set(deltas) - used
    if missing:
        raise ValueError(f"{adapter}: LoRA weights for modules the decoder does not have: {sorted(missing)[:3]}")
