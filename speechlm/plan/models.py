"""Model shapes for the planner, without downloading weights: configs built on the meta device
(local dir / `tiny/*`, the Hub's config.json, or the real configs bundled in
`speechlm/model/configs/`), exact counts and download sizes from safetensors headers, and the
calibrated activation-per-token model (see `speechlm.plan`)."""

from __future__ import annotations

import functools
import glob
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from speechlm.config import Config, ConfigError
from speechlm.model import encoders, ids
from speechlm.model.hfconfig import CONFIG_DIR, bundled_config_path
from speechlm.model.projector import Projector

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


def model_config(model_id: str):
    """(transformers config, where it came from) without downloading weights."""
    from transformers import AutoConfig

    if Path(model_id).is_dir():
        return AutoConfig.from_pretrained(model_id), f"local {model_id}"
    if not _offline():
        try:
            return AutoConfig.from_pretrained(model_id), f"hub {model_id}"
        except Exception as e:  # unreachable Hub or gated repo: fall back to the bundled shapes
            print(
                f"plan: {model_id}: hub config unavailable ({type(e).__name__}); using the bundled one", file=sys.stderr
            )
    p = bundled_config_path(model_id)
    if p is None:
        raise ConfigError(f"model '{model_id}': no local dir, no Hub access and no bundled config in {CONFIG_DIR}")
    d = json.loads(p.read_text())
    d = {k: v for k, v in d.items() if k not in ("hub_id", "model_id")}
    return AutoConfig.for_model(**d), f"bundled {p.name}"


def _sub_config(cfg, *names):
    for n in names:
        sub = getattr(cfg, n, None)
        if sub is not None and not isinstance(sub, (int, str, bool, list)):
            return sub
    return cfg


@functools.lru_cache(maxsize=8)
def encoder_family(model_id: str):
    """The encoder family (speechlm.model.encoders) of `model_id`, from the config model_config finds."""
    return encoders.family_from_config(model_config(ids.resolve(model_id))[0], model_id)


def meta_model(cfg, kind: str = "decoder"):
    """The decoder on the meta device: shapes and counts for free (an encoder's: its family's meta_encoder)."""
    from transformers import AutoModelForCausalLM

    if kind != "decoder":
        raise ValueError(f"meta_model builds decoders; an encoder comes from its family, not {kind!r}")
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(cfg.get_text_config(decoder=True))


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


def model_shapes(cfg: Config) -> Shapes:
    m = cfg.model
    audio_id, text_id = ids.resolve(m.audio_model_id), ids.resolve(m.text_model_id)  # tiny/* -> its dir
    _, enc_src = model_config(audio_id)
    dec_cfg, dec_src = model_config(text_id)
    family = encoder_family(m.audio_model_id)
    enc = family.meta_encoder()
    dec = meta_model(dec_cfg, "decoder")
    n_enc = sum(p.numel() for p in enc.parameters())
    n_dec = sum(p.numel() for p in dec.parameters())
    enc_h = family.hidden_size
    tcfg = dec_cfg.get_text_config(decoder=True)
    h = tcfg.hidden_size
    with torch.device("meta"):
        proj = Projector(enc_h, h, m.projector_hidden_dim, m.projector_pool_stride)
    n_proj = sum(p.numel() for p in proj.parameters())
    use_lora = cfg.training.use_lora if cfg.training.use_lora is not None else m.use_lora
    # per decoder layer: the residual stream + every Linear's output (+ the LoRA bottleneck)
    layers = dec.model.layers
    act, act_chunked, n_lora = 0.0, 0.0, 0
    largest, largest_chunked = 0.0, 0.0
    for layer in layers:
        lins = _linear_layers(layer)
        wrapped = (
            lins
            if use_lora and _lora_targets_all(m.lora_target_modules)
            else [(n, l) for n, l in lins if use_lora and n.split(".")[-1] in (m.lora_target_modules or [])]
        )
        n_lora += sum(m.lora_rank * (l.in_features + l.out_features) for _, l in wrapped)
        one = ACT_FACTOR * (h + sum(l.out_features for _, l in lins) + m.lora_rank * len(wrapped))
        act += one
        largest = max(largest, one)
        if hasattr(layer, "linear_attn"):
            one = tcfg.linear_num_value_heads * (
                LINEAR_ATTN_PER_DIM * tcfg.linear_value_head_dim + LINEAR_ATTN_PER_HEAD
            )
            act_chunked += one
            largest_chunked = max(largest_chunked, one)
    train = cfg.training
    # the family states what its encoder keeps per frame, frozen (a transient) or trained (every layer)
    enc_act = family.activation_elems_per_frame(enc, not train.freeze_audio_encoder, ACT_FACTOR)
    n_lora = n_lora if use_lora else 0
    trainable = (0 if train.freeze_projector else n_proj) + n_lora
    trainable += 0 if train.freeze_audio_encoder else n_enc
    trainable += 0 if (train.freeze_language_model or use_lora) else n_dec
    frozen = n_enc + n_dec + n_proj + n_lora - trainable
    ck_enc, ck_dec = (
        hub_checkpoint(audio_id, "encoder", family.unused_checkpoint_keys),
        hub_checkpoint(text_id, "decoder"),
    )
    sources = {"encoder": enc_src, "decoder": dec_src}
    for part, ck, n in (("encoder", ck_enc, n_enc), ("decoder", ck_dec, n_dec)):
        if ck:
            sources[f"{part}_checkpoint_params"] = ck["params_used"]
            sources[f"{part}_meta_params"] = n
    dl = sum(ck["download_bytes"] for ck in (ck_enc, ck_dec) if ck) if (ck_enc or ck_dec) else None
    return Shapes(
        encoder_params=n_enc,
        decoder_params=n_dec,
        projector_params=n_proj,
        lora_params=n_lora,
        trainable_params=trainable,
        frozen_params=frozen,
        decoder_hidden=h,
        vocab_size=tcfg.vocab_size,
        act_elems_per_token=act,
        act_chunked_elems_per_token=act_chunked,
        ckpt_act_elems_per_token=len(layers) * h + largest,
        ckpt_act_chunked_elems_per_token=largest_chunked,
        enc_act_elems_per_frame=enc_act,
        encoder_trained=not train.freeze_audio_encoder,
        enc_frames_per_second=family.frames_per_second,
        download_bytes=dl,
        sources=sources,
        family=family,
    )


def _lora_targets_all(targets) -> bool:
    return targets == "all-linear" or targets == ["all-linear"]
