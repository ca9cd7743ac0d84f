"""Model shapes for the planner, without downloading weights: the SpeechLM the config trains, built
on the meta device by the trainer's own builders (speechlm.model.meta: `load_parts` from the configs
alone, the local ones or the real configs bundled in `speechlm/model/configs/`, then `assemble` with
`trainable_parts`), so every freeze flag and LoRA setting counts as it trains; exact checkpoint counts
and download sizes from safetensors headers; and the calibrated activation-per-token model (see
`speechlm.plan`)."""

from __future__ import annotations

import functools
import glob
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from speechlm.config import Config
from speechlm.model import encoders, ids
from speechlm.model.hfconfig import config_source, text_config
from speechlm.model.meta import meta_speechlm

# elements autograd saves per token, per element of the per-layer sum (measured as described above:
# 1.85 for Qwen3 layers, 1.90-1.99 for Qwen3.5's full-attention layers)
ACT_FACTOR = 1.95
# Qwen3.5's gated-delta-rule layers through transformers' torch reference kernels (no
# flash-linear-attention) save chunked intermediates on top: per value head, per token,
# LINEAR_ATTN_PER_DIM * head_dim + LINEAR_ATTN_PER_HEAD elements (fitted on head_dim 16-128)
LINEAR_ATTN_PER_DIM = 22.0
LINEAR_ATTN_PER_HEAD = 100
LINEAR_ATTN_CHUNK = 64  # the torch kernel pads each sequence to a multiple of its chunk


def _offline() -> bool:
    from huggingface_hub import constants

    return constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false")


@functools.lru_cache(maxsize=16)
def fetch_config(model_id: str) -> None:
    """With the Hub reachable, its config.json into the local cache (the builders read local files
    only); else the bundled config stands in for it. Never weights."""
    if _offline() or Path(ids.resolve(model_id)).is_dir():
        return
    from huggingface_hub import hf_hub_download

    try:
        hf_hub_download(model_id, "config.json")
    except Exception as e:  # unreachable Hub or gated repo: the bundled shapes, if any
        print(f"plan: {model_id}: hub config unavailable ({type(e).__name__}); using the bundled one", file=sys.stderr)


@functools.lru_cache(maxsize=8)
def encoder_family(model_id: str, trust_remote_code: bool = False):
    """The encoder family (speechlm.model.encoders) of `model_id`, from its config (local or bundled)."""
    fetch_config(model_id)
    return encoders.family_for(model_id, trust_remote_code, allow_bundled=True)


def hub_checkpoint(model_id: str, part: str, skip: tuple[str, ...] | None = None) -> dict | None:
    """Exact counts and download bytes from the safetensors headers (local files or the Hub).
    `skip`: key fragments of tensors the part does not use (an encoder family's `unused_checkpoint_keys`)."""
    tensors: dict = {}
    if Path(model_id).is_dir():
        from safetensors import safe_open

        files = sorted(glob.glob(str(Path(model_id) / "*.safetensors")))
        if not files:
            return None
        for f in files:
            with safe_open(f, "pt") as fh:
                for k in fh.keys():
                    sl = fh.get_slice(k)
                    tensors[k] = (sl.get_dtype(), sl.get_shape())
        nbytes = sum(os.path.getsize(f) for f in files)
    elif not _offline():
        from huggingface_hub import get_safetensors_metadata

        try:
            meta = get_safetensors_metadata(model_id)
        except Exception as e:
            print(f"plan: {model_id}: safetensors metadata unavailable ({type(e).__name__})", file=sys.stderr)
            return None
        for fm in meta.files_metadata.values():
            for k, t in fm.tensors.items():
                tensors[k] = (t.dtype, t.shape)
        nbytes = sum(
            t.data_offsets[1] - t.data_offsets[0] for fm in meta.files_metadata.values() for t in fm.tensors.values()
        )
    else:
        return None
    # multimodal checkpoints carry towers speechlm doesn't load (e.g. Qwen3.5's vision tower)
    if skip is None:
        skip = ("visual", "vision", "mtp.") if part == "decoder" else ()
    used = {k: v for k, v in tensors.items() if not any(s in k for s in skip)}
    count = lambda ts: sum(math.prod(s) for _, s in ts.values())  # noqa: E731
    return {"params_total": count(tensors), "params_used": count(used), "download_bytes": nbytes}


@dataclass
class Shapes:
    encoder_params: int
    decoder_params: int
    projector_params: int
    lora_params: int
    trainable_params: int
    frozen_params: int
    frozen_bytes: int  # the frozen weights as stored (encoder and decoder in model_dtype, a frozen projector)
    decoder_hidden: int
    vocab_size: int
    act_elems_per_token: float  # saved elements per token, all decoder layers (module docstring)
    act_chunked_elems_per_token: float  # the linear-attention part, per position padded to a chunk
    # the same two with gradient checkpointing on the decoder layers: each layer keeps only its input
    # (hidden per token) and the backward recomputes one layer at a time (the largest one's worth)
    ckpt_act_elems_per_token: float
    ckpt_act_chunked_elems_per_token: float
    enc_act_elems_per_frame: float
    encoder_trained: bool
    enc_frames_per_second: float
    download_bytes: int | None
    sources: dict = field(default_factory=dict)
    family: object = None  # the encoder family the shapes were resolved with


def _linear_layers(module):
    return [(n, m) for n, m in module.named_modules() if isinstance(m, torch.nn.Linear)]


def _layer_act(layer, h: int) -> float:
    """Elements a decoder layer saves per token: the residual stream, every Linear's output and each
    LoRA bottleneck (its lora_A's output, rank elements)."""
    outs = 0
    for name, lin in _linear_layers(layer):
        if "lora_A" in name:
            outs += lin.out_features
        elif "lora_" not in name:  # a LoRA-wrapped Linear's base_layer counts as the Linear
            outs += lin.out_features
    return ACT_FACTOR * (h + outs)


@dataclass
class _DecoderActs:
    """Saved elements per token over the decoder layers: in all, and the largest single layer's."""

    total: float = 0.0
    chunked: float = 0.0  # the linear-attention part, per position padded to a chunk
    largest: float = 0.0
    largest_chunked: float = 0.0


def _decoder_acts(layers, tcfg, h: int) -> _DecoderActs:
    """Per decoder layer: the residual stream + every Linear's output (+ the LoRA bottleneck), and a
    linear-attention layer's chunked intermediates."""
    acts = _DecoderActs()
    for layer in layers:
        one = _layer_act(layer, h)
        acts.total += one
        acts.largest = max(acts.largest, one)
        if hasattr(layer, "linear_attn"):
            one = tcfg.linear_num_value_heads * (
                LINEAR_ATTN_PER_DIM * tcfg.linear_value_head_dim + LINEAR_ATTN_PER_HEAD
            )
            acts.chunked += one
            acts.largest_chunked = max(acts.largest_chunked, one)
    return acts


def _checkpoints(cfg: Config, family, counts: dict) -> tuple[dict, int | None]:
    """(where each part's shapes came from, with the checkpoint's and the meta model's counts side by
    side; the download bytes of both checkpoints, None when neither is readable)."""
    m = cfg.model
    audio_id, text_id = ids.resolve(m.audio_model_id), ids.resolve(m.text_model_id)  # tiny/* -> its dir
    ck_enc, ck_dec = (
        hub_checkpoint(audio_id, "encoder", family.unused_checkpoint_keys),
        hub_checkpoint(text_id, "decoder"),
    )
    sources = {
        "encoder": config_source(m.audio_model_id, m.trust_remote_code),
        "decoder": config_source(m.text_model_id, m.trust_remote_code),
    }
    for part, ck in (("encoder", ck_enc), ("decoder", ck_dec)):
        if ck:
            sources[f"{part}_checkpoint_params"] = ck["params_used"]
            sources[f"{part}_meta_params"] = counts[part][0]
    dl = sum(ck["download_bytes"] for ck in (ck_enc, ck_dec) if ck) if (ck_enc or ck_dec) else None
    return sources, dl


def model_shapes(cfg: Config, family=None) -> Shapes:
    """Counts, stored bytes and activation figures of the model `cfg` trains, from its meta-device build.
    `family`: the run's encoder family when the caller holds it (the trainer does), else resolved here."""
    m = cfg.model
    for mid in (m.audio_model_id, m.text_model_id):
        fetch_config(mid)
    family = family or encoder_family(m.audio_model_id, m.trust_remote_code)
    model = meta_speechlm(cfg, family)
    counts = model.parameter_counts()  # part -> (total, trainable), tied weights once
    params = list(model.parameters())
    trainable = sum(p.numel() for p in params if p.requires_grad)
    frozen_bytes = sum(p.numel() * p.element_size() for p in params if not p.requires_grad)
    base = model._base_lm()
    tcfg = text_config(base.config)
    h = tcfg.hidden_size
    layers = base.model.layers
    acts = _decoder_acts(layers, tcfg, h)
    # the family states what its encoder keeps per frame, frozen (a transient) or trained (every layer)
    enc_trained = model.trainable["encoder"]
    enc_act = family.activation_elems_per_frame(model.encoder, enc_trained, ACT_FACTOR)
    sources, download_bytes = _checkpoints(cfg, family, counts)
    return Shapes(
        encoder_params=counts["encoder"][0],
        decoder_params=counts["decoder"][0],
        projector_params=counts["projector"][0],
        lora_params=counts["lora"][0],
        trainable_params=trainable,
        frozen_params=sum(p.numel() for p in params) - trainable,
        frozen_bytes=frozen_bytes,
        decoder_hidden=h,
        vocab_size=base.get_output_embeddings().weight.shape[0],
        act_elems_per_token=acts.total,
        act_chunked_elems_per_token=acts.chunked,
        ckpt_act_elems_per_token=len(layers) * h + acts.largest,
        ckpt_act_chunked_elems_per_token=acts.largest_chunked,
        enc_act_elems_per_frame=enc_act,
        encoder_trained=enc_trained,
        enc_frames_per_second=family.frames_per_second,
        download_bytes=download_bytes,
        sources=sources,
        family=family,
    )
