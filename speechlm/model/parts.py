"""Loading the pretrained parts (hub id, local dir, `tiny/<name>`, or bundled config on meta)."""
from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, GraniteSpeech5Encoder, GraniteSpeech5EncoderConfig

from speechlm import tiny
from speechlm.config import ConfigError
from speechlm.model.loading import load_pretrained

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


def encoder_config(cfg) -> GraniteSpeech5EncoderConfig:
    """The encoder config inside a Granite Speech 5 CTC config, or the config itself."""
    cfg = getattr(cfg, "encoder_config", cfg)
    if not isinstance(cfg, GraniteSpeech5EncoderConfig):
        raise ConfigError(f"model.audio_model_id: expected a Granite Speech 5 model, got model_type '{cfg.model_type}'")
    return cfg


def text_config(cfg):
    """The text decoder's config (multimodal hub configs such as Qwen3.5's nest it)."""
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def attn_implementation(requested: str) -> str:
    if requested != "auto":
        return requested
    if torch.cuda.is_available() and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return "sdpa"


def load_encoder(model_id: str, dtype: torch.dtype, trust_remote_code: bool = False) -> GraniteSpeech5Encoder:
    path = tiny.resolve(model_id)
    cfg = encoder_config(AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code))
    # the hub checkpoints are GraniteSpeech5ForCTC; the bare encoder loads from them (prefix "encoder.")
    enc = load_pretrained(GraniteSpeech5Encoder, path, "encoder", config=cfg, dtype=dtype, attn_implementation="sdpa")
    # transformers keeps conv.norm (BatchNorm) in fp32, while DeepSpeed bf16 casts parameters but not
    # buffers: make every tensor one dtype on purpose so no mixed-dtype BatchNorm can happen.
    return enc.to(dtype)


def load_decoder(model_id: str, dtype: torch.dtype, attn: str, trust_remote_code: bool = False):
    path = tiny.resolve(model_id)
    return load_pretrained(
        AutoModelForCausalLM, path, "decoder", dtype=dtype, attn_implementation=attn, trust_remote_code=trust_remote_code
    )


def meta_encoder(model_id: str) -> GraniteSpeech5Encoder:
    cfg = encoder_config(load_config(model_id, allow_bundled=True))
    with torch.device("meta"):
        return GraniteSpeech5Encoder(cfg)


def meta_decoder(model_id: str, trust_remote_code: bool = False):
    cfg = text_config(load_config(model_id, trust_remote_code, allow_bundled=True))
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(cfg, trust_remote_code=trust_remote_code)
