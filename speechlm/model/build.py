"""build_model(cfg): load the parts, apply freeze flags and LoRA, attach the loss, calibrate the projector."""

from __future__ import annotations

import logging

import numpy as np
import torch
from peft import LoraConfig

from speechlm.audio_checks import SAMPLE_RATE
from speechlm.config import Config, ConfigError, ModelConfig, TrainingConfig
from speechlm.model import encoders, parts
from speechlm.model.encoder_cache import EncoderCache
from speechlm.model.folder.layout import assemble_speechlm
from speechlm.model.loss import LOSSES, TokenLoss
from speechlm.model.speechlm import SpeechLM

log = logging.getLogger(__name__)


def trainable_parts(mcfg: ModelConfig, tcfg: TrainingConfig) -> dict:
    """Which parts train, from the freeze flags; refuses combinations that can't work."""
    use_lora = mcfg.use_lora
    if use_lora and not tcfg.freeze_language_model:
        raise ConfigError(
            "training.freeze_language_model=false with LoRA on: full fine-tuning and adapters at once "
            "is not supported; set model.use_lora=false to train the whole decoder"
        )
    parts_ = {
        "encoder": not tcfg.freeze_audio_encoder,
        "projector": not tcfg.freeze_projector,
        "decoder": not tcfg.freeze_language_model,
        "embed_tokens": not tcfg.freeze_text_embed_tokens,
        "lora": bool(use_lora),
    }
    if not any(parts_.values()):
        raise ConfigError(
            "nothing left to train: training.freeze_audio_encoder, freeze_projector, freeze_language_model and "
            "freeze_text_embed_tokens are all true and LoRA is off"
        )
    return parts_


def make_loss(tcfg: TrainingConfig) -> TokenLoss:
    """The configured `training.loss`."""
    if tcfg.loss not in LOSSES:
        raise ConfigError(f"training.loss: unknown loss '{tcfg.loss}'; known: {', '.join(LOSSES)}")
    return LOSSES[tcfg.loss]()


def lora_config(mcfg: ModelConfig):
    return LoraConfig(
        r=mcfg.lora_rank,
        lora_alpha=mcfg.lora_alpha,
        lora_dropout=mcfg.lora_dropout,
        target_modules=mcfg.lora_target_modules,
        task_type="CAUSAL_LM",
    )


def assemble(cfg: Config, encoder, decoder, tokenizer, trainable: dict, family) -> SpeechLM:
    """Wire loaded parts into a SpeechLM for training (speechlm.model.folder.layout.assemble_speechlm, the
    one assembly a folder's reader shares): freeze flags, fresh LoRA, the projector, the loss, gradient
    checkpointing. `family` is the encoder's (speechlm.model.encoders), resolved once by the caller.
    `tokenizer` is None only for a shapes-only build on the meta device (speechlm.model.meta)."""
    mcfg, tcfg = cfg.model, cfg.training
    model = assemble_speechlm(
        mcfg,
        encoder,
        decoder,
        tokenizer,
        family,
        trainable,
        bf16=tcfg.bf16,
        loss=make_loss(tcfg),
        projector_dtype=mcfg.projector_dtype,
        ctc_weight=tcfg.ctc_weight,
        lora=lora_config(mcfg) if trainable["lora"] else None,
    )
    if tcfg.encoder_cache_gb > 0:
        model.encoder_cache = EncoderCache(tcfg.encoder_cache_gb)
    if tcfg.gradient_checkpointing:
        # non-reentrant: gradients reach LoRA and the projector even though the frozen embedding's
        # output does not require grad (pitfall 11)
        model._base_lm().activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    return model


def build_model(cfg: Config, calibration_waves: list[np.ndarray] | None = None, family=None) -> SpeechLM:
    """The model a config describes, from hub ids, local dirs or `tiny/<name>` ids. `family`: the
    run's encoder family when the caller has resolved it already."""
    mcfg, tcfg = cfg.model, cfg.training
    trainable = trainable_parts(mcfg, tcfg)
    attn = parts.attn_implementation(tcfg.attn_implementation)
    log.info("decoder attention implementation: %s (requested %s)", attn, tcfg.attn_implementation)
    family = family or encoders.family_for(mcfg.audio_model_id, mcfg.trust_remote_code)
    log.info("audio encoder family: %s", family.name)
    encoder, decoder, tokenizer = parts.load_parts(mcfg, family, attn=attn)
    model = assemble(cfg, encoder, decoder, tokenizer, trainable, family)
    if mcfg.calibrate_projector:
        calibrate(model, calibration_waves)
    log.info("parameters:\n%s", model.parameter_table())
    return model


def synthetic_waves(n: int = 4, seconds: float = 2.0, seed: int = 0) -> list[np.ndarray]:
    """Tones plus noise: a stand-in for speech when no real audio is at hand for calibration."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(SAMPLE_RATE * seconds)) / SAMPLE_RATE
    waves = []
    for _ in range(n):
        f0 = rng.uniform(90, 300)
        w = sum(np.sin(2 * np.pi * f0 * h * t) / h for h in range(1, 6)) * 0.1
        waves.append((w * (1 + np.sin(2 * np.pi * 3 * t)) + 0.02 * rng.standard_normal(t.size)).astype(np.float32))
    return waves


def rms(x: torch.Tensor) -> float:
    return x.float().pow(2).mean().sqrt().item()


@torch.no_grad()
def calibrate(model: SpeechLM, waves: list[np.ndarray] | None = None) -> dict:
    """Scale the projector's output so projected audio has the RMS of the decoder's text embeddings."""
    source = "audio batch" if waves else "synthetic tones+noise"
    waves = waves or synthetic_waves()
    device = next(model.projector.parameters()).device
    feats, mask = model.features(waves)
    with model._autocast(device):
        proj, lengths = model.encode_audio(feats.to(device), mask.to(device))
    valid = torch.arange(proj.shape[1], device=device)[None, :] < lengths[:, None]
    audio_rms = rms(proj[valid])
    table = model._base_lm().get_input_embeddings().weight
    text_rms = rms(table[: len(model.tokenizer)])  # rows past the tokenizer were never trained
    factor = text_rms / max(audio_rms, 1e-12)
    model.projector.rescale_output(factor)
    model.calibration = {"source": source, "audio_rms_before": audio_rms, "text_rms": text_rms, "factor": factor}
    log.info(
        "projector calibration (%s): audio RMS %.4g -> text-embedding RMS %.4g (x%.4g)",
        source,
        audio_rms,
        text_rms,
        factor,
    )
    return model.calibration
