"""Export and reload a SpeechLM as plain Hugging Face / safetensors files (no pickle).

Layout of an export dir:
  speechlm.json              model config, trained parts, calibration, encoder family + its feature settings
  projector.safetensors      projector weights
  adapter/                   peft LoRA adapter (loads with PeftModel.from_pretrained on the base decoder)
  embed_tokens.safetensors   input embeddings, when they were trained but the rest of the decoder wasn't
  decoder/, encoder/         full HF model dirs, only when those were trained
  tokenizer/                 the tokenizer with the audio token
Under ZeRO-3 every rank must call save_pretrained (parameters are gathered collectively); rank 0 writes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path

import torch
from peft import PeftModel, get_peft_model_state_dict
from safetensors.torch import load_file, save_file

from speechlm import text
from speechlm.config import Config, ModelConfig, TrainingConfig, build
from speechlm.model import encoders, parts
from speechlm.model.build import assemble

FORMAT = 1


def _rank() -> int:
    return (
        torch.distributed.get_rank() if torch.distributed.is_available() and torch.distributed.is_initialized() else 0
    )


def _gathered(params):
    """Full parameters inside the block, also when ZeRO-3 has partitioned them (pitfall 1)."""
    params = [p for p in params if hasattr(p, "ds_id")]
    if not params:
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(params, modifier_rank=None)


def _masters(module) -> dict:
    """Parameter name -> the optimizer's fp32 master, for the trainable parameters that have one.

    In DeepSpeed's bf16 mode the module holds bf16 copies of the trainables and the fp32 values live
    in the optimizer; an export of the bf16 copies would round away what the masters kept. Every rank
    calls this (under ZeRO-3 the masters are gathered collectively); outside an engine it is empty.
    """
    if not any(hasattr(p, "ds_id") or hasattr(p, "_hp_mapping") for p in module.parameters()):
        return {}
    from deepspeed.utils import safe_get_full_fp32_param

    out = {}
    for name, p in module.named_parameters():
        # `_hp_mapping` is None on a rank that holds no fragment of p, but p's gather is collective
        # (an all-reduce under ZeRO-1/2): every rank must call it for the same parameters, in order
        if p.requires_grad and (hasattr(p, "_z3_optimizer") or hasattr(p, "_hp_mapping")):
            full = safe_get_full_fp32_param(p)
            if full is not None:
                out[name] = full.detach().cpu().clone().contiguous()
    return out


def _state(module, keep=lambda name: True) -> dict:
    masters = _masters(module)
    with _gathered(module.parameters()):
        state = {k: v.detach().cpu().clone().contiguous() for k, v in module.state_dict().items() if keep(k)}
    return {k: masters.get(k, v) for k, v in state.items()}


def save_pretrained(model, path) -> None:
    path = Path(path)
    t = model.trainable
    proj = _state(model.projector)
    base = model._base_lm()
    adapter = embed = decoder = encoder = None
    if t["lora"]:
        masters = _masters(model.decoder)
        with _gathered([p for n, p in model.decoder.named_parameters() if "lora_" in n]):
            # peft names the adapter's tensors like the module's state dict, minus the adapter name
            state = {k: masters.get(k, v) for k, v in model.decoder.state_dict().items()}
            adapter = {
                k: v.detach().cpu().clone()
                for k, v in get_peft_model_state_dict(model.decoder, state_dict=state).items()
            }
    if t["decoder"]:
        # the full decoder, in HF form; under peft there is none (refused at build)
        decoder = _state(base)
    elif t["embed_tokens"]:
        w = base.get_input_embeddings().weight
        with _gathered([w]):
            embed = {"weight": w.detach().cpu().clone()}
    if t["encoder"]:
        encoder = _state(model.encoder)
    if _rank() != 0:
        return
    path.mkdir(parents=True, exist_ok=True)
    save_file(proj, path / "projector.safetensors")
    if adapter is not None:
        model.decoder.save_pretrained(path / "adapter", state_dict=adapter, safe_serialization=True)
    if embed is not None:
        save_file(embed, path / "embed_tokens.safetensors")
    if decoder is not None:
        base.save_pretrained(path / "decoder", state_dict=decoder, safe_serialization=True)
    if encoder is not None:
        model.encoder.save_pretrained(path / "encoder", state_dict=encoder, safe_serialization=True)
    model.tokenizer.save_pretrained(path / "tokenizer")
    meta = {
        "format": FORMAT,
        "model": dataclasses.asdict(model.cfg),
        "trainable": t,
        "bf16": model.bf16,
        "calibration": model.calibration,
        "encoder_family": model.family.name,
        "features": model.features.to_dict(),
    }
    (path / "speechlm.json").write_text(json.dumps(meta, indent=2) + "\n")


def from_pretrained(path, device=None, trust_remote_code: bool = False):
    path = Path(path)
    meta_file = path / "speechlm.json"
    if not meta_file.is_file():
        raise FileNotFoundError(f"{path} is not a speechlm export (no speechlm.json)")
    meta = json.loads(meta_file.read_text())
    # exports from before encoder families recorded the Granite conv stack, now the family's own
    meta["model"].pop("encoder_conv_layers", None)
    mcfg = build(ModelConfig, meta["model"], prefix="model")
    # the caller decides, never the (possibly downloaded) export itself
    mcfg.trust_remote_code = bool(trust_remote_code)
    t = meta["trainable"]
    dtype = parts.DTYPES[mcfg.model_dtype]
    attn = parts.attn_implementation("auto")
    enc_src = str(path / "encoder") if (path / "encoder").is_dir() else mcfg.audio_model_id
    dec_src = str(path / "decoder") if (path / "decoder").is_dir() else mcfg.text_model_id
    family = encoders.family_for(enc_src, mcfg.trust_remote_code, features_settings=meta.get("features"))
    saved = meta.get("encoder_family", "granite_speech5")  # exports before families were all Granite
    if family.name != saved:
        raise ValueError(f"{path}: exported with a {saved} encoder, but {enc_src} is a {family.name} encoder")
    encoder = parts.load_encoder(family, enc_src, dtype)
    decoder = parts.load_decoder(dec_src, dtype, attn, mcfg.trust_remote_code)
    tokenizer = text.load_tokenizer(str(path / "tokenizer"), mcfg.audio_token)
    # rebuild the same structure, then load the trained weights into it
    tcfg = TrainingConfig(
        freeze_audio_encoder=not t["encoder"],
        freeze_projector=not t["projector"],
        freeze_language_model=not t["decoder"],
        freeze_text_embed_tokens=not t["embed_tokens"],
        use_lora=False,
        bf16=meta.get("bf16", True),
    )
    # parts are frozen for inference; LoRA comes from the saved adapter, not a fresh one
    frozen = {k: False for k in t}
    model = assemble(Config(model=mcfg, training=tcfg), encoder, decoder, tokenizer, frozen, family)
    if t["lora"]:
        model.decoder = PeftModel.from_pretrained(model.decoder, str(path / "adapter"), is_trainable=False)
    if (path / "embed_tokens.safetensors").is_file():
        w = load_file(path / "embed_tokens.safetensors")["weight"]
        model._base_lm().get_input_embeddings().weight.data.copy_(w)
    model.projector.load_state_dict(load_file(path / "projector.safetensors"))
    model.trainable = dict(t)  # what this model holds beyond its bases (so it re-exports the same); all frozen
    model.calibration = meta.get("calibration")
    if device is not None:
        model.to(device)
    return model.eval()
