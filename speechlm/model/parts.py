"""Loading the pretrained parts (hub id, local dir, `tiny/<name>`, `offline/<name>`, or the bundled
config on meta): `load_parts` is the one path, shared by the preflight (meta device, every check,
no weights), the planner (meta device, configs only: `shapes_only`) and the build.

Encoders load as their family says (speechlm.model.encoders); the decoder is any causal LM.
"""

from __future__ import annotations

import contextlib
import importlib.util

import torch
from transformers import AutoModelForCausalLM

from speechlm.model import ids
from speechlm.model.hfconfig import bundled_config_path, load_config, text_config  # noqa: F401  (re-exported)
from speechlm.model.loading import check_tokenizer, load_pretrained, load_tokenizer, meta_only
from speechlm.model.speechlm import DTYPES  # noqa: E402, F401  (re-exported: the loaders' dtypes)


def attn_implementation(requested: str) -> str:
    if requested != "auto":
        return requested
    if torch.cuda.is_available() and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return "sdpa"


def load_encoder(family, model_id: str, dtype: torch.dtype):
    """The encoder of `model_id` as its family loads it: the family's class, config and key mapping."""
    attn = {"attn_implementation": family.attn_implementation} if family.attn_implementation else {}
    enc = load_pretrained(
        family.pretrained_class,
        ids.resolve(model_id),
        "encoder",
        config=family.config,
        dtype=dtype,
        **attn,
        **family.load_kwargs,
    )
    return family.after_load(enc, dtype)


def load_decoder(model_id: str, dtype: torch.dtype, attn: str, trust_remote_code: bool = False):
    return load_pretrained(
        AutoModelForCausalLM,
        ids.resolve(model_id),
        "decoder",
        dtype=dtype,
        attn_implementation=attn,
        trust_remote_code=trust_remote_code,
    )


def load_parts(mcfg, family, *, attn: str = "sdpa", meta: bool = False, shapes_only: bool = False):
    """(encoder, decoder, tokenizer) of a model config, every part checked (speechlm.model.loading).
    With `meta=True` the parts are built on the meta device: all checks, no weights in memory.
    With `shapes_only=True` (the planner) they are built on the meta device from their configs alone,
    the bundled real ones where a model is not local: no checkpoint or tokenizer is read, and the
    tokenizer is None (`family` then comes from `family_for(..., allow_bundled=True)`)."""
    dtype = DTYPES[mcfg.model_dtype]
    with meta_only(shapes=shapes_only) if (meta or shapes_only) else contextlib.nullcontext():
        encoder = load_encoder(family, mcfg.audio_model_id, dtype)
        decoder = load_decoder(mcfg.text_model_id, dtype, attn, mcfg.trust_remote_code)
    if shapes_only:
        return encoder, decoder, None
    tokenizer = load_tokenizer(ids.resolve(mcfg.text_model_id), mcfg.audio_token, mcfg.trust_remote_code)
    check_tokenizer(tokenizer, decoder, mcfg.text_model_id, mcfg.audio_token)
    return encoder, decoder, tokenizer


def preflight(mcfg, family) -> None:
    """Every pretrained part of `mcfg` checked on the meta device: seconds, no weights in memory."""
    load_parts(mcfg, family, meta=True)


def meta_decoder(model_id: str, trust_remote_code: bool = False):
    cfg = text_config(load_config(model_id, trust_remote_code, allow_bundled=True))
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(cfg, trust_remote_code=trust_remote_code)
