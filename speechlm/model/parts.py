"""Loading the pretrained parts (hub id, local dir, `tiny/<name>`, or bundled config on meta).

Encoders load through their family (speechlm.model.encoders); the decoder is any causal LM."""
from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from speechlm import tiny
from speechlm.config import ConfigError

log = logging.getLogger(__name__)
CONFIG_DIR = Path(__file__).parent / "configs"
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def bundled_config_path(model_id: str) -> Path:
    return CONFIG_DIR / (model_id.replace("/", "--") + ".json")


def load_config(model_id: str, trust_remote_code: bool = False, allow_bundled: bool = False):
    """AutoConfig for a model id without any download; optionally the bundled copy as a fallback."""
    path = tiny.resolve(model_id)
    try:
        return AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code, local_files_only=True)
    except (OSError, ValueError) as e:
        bundled = bundled_config_path(model_id)
        if not (allow_bundled and bundled.is_file()):
            raise ConfigError(f"can't read the config of '{model_id}' locally ({type(e).__name__}) and none is bundled") from None
        d = {k: v for k, v in json.loads(bundled.read_text()).items() if not k.startswith("_")}
        log.info("%s: not available locally, using the bundled config %s", model_id, bundled.name)
        return AutoConfig.for_model(d.pop("model_type"), **d)


def text_config(cfg):
    """The text decoder's config (multimodal hub configs such as Qwen3.5's nest it)."""
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def attn_implementation(requested: str) -> str:
    if requested != "auto":
        return requested
    if torch.cuda.is_available() and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return "sdpa"


def load_encoder(model_id: str, dtype: torch.dtype, trust_remote_code: bool = False):
    """The encoder module of `model_id`, loaded by its family (speechlm.model.encoders)."""
    from speechlm.model import encoders

    return encoders.family_for(model_id, trust_remote_code).load(model_id, dtype, trust_remote_code)


def load_decoder(model_id: str, dtype: torch.dtype, attn: str, trust_remote_code: bool = False):
    path = tiny.resolve(model_id)
    return AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, attn_implementation=attn, trust_remote_code=trust_remote_code
    )


def meta_encoder(model_id: str):
    from speechlm.model import encoders

    return encoders.family_for(model_id, allow_bundled=True).meta_encoder()


def meta_decoder(model_id: str, trust_remote_code: bool = False):
    cfg = text_config(load_config(model_id, trust_remote_code, allow_bundled=True))
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(cfg, trust_remote_code=trust_remote_code)
