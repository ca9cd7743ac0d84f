"""The configured SpeechLM on the meta device, from the models' configs alone: what the planner
(speechlm.plan) and `python -m speechlm.model --count` count.

It is the trainer's own build (`parts.load_parts`, `build.assemble` with `trainable_parts`), only
with `shapes_only`: no checkpoint or tokenizer read, the bundled real configs where a model is not
local. So every freeze flag and LoRA setting counts exactly as it trains (tests/plan/test_plan_model.py).
"""

from __future__ import annotations

import warnings

import torch

from speechlm.config import Config
from speechlm.model import encoders, parts
from speechlm.model.build import assemble, trainable_parts
from speechlm.model.speechlm import SpeechLM


def meta_speechlm(cfg: Config, family=None) -> SpeechLM:
    """The SpeechLM `cfg` trains, on the meta device, without a tokenizer (it never runs).
    `family`: the encoder family when the caller has it (else resolved from the configs)."""
    m = cfg.model
    trainable = trainable_parts(m, cfg.training)
    family = family or encoders.family_for(m.audio_model_id, m.trust_remote_code, allow_bundled=True)
    encoder, decoder, tokenizer = parts.load_parts(m, family, shapes_only=True)
    with torch.device("meta"), warnings.catch_warnings():  # the projector and LoRA weights too: no memory
        # peft reads transformers' deprecated `is_gradient_checkpointing`: not the planner's to report
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
        return assemble(cfg, encoder, decoder, tokenizer, trainable, family)
