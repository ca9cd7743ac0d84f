"""Shared helpers for the model tests: a tiny config and a batch in the collator's format."""

import numpy as np
import torch

from speechlm import text
from speechlm.config import Config, ModelConfig, TrainingConfig


def tiny_config(
    decoder="tiny/qwen3_5", stride=1, calibrate=False, encoder="tiny/granite_speech5", use_lora=True, **training
) -> Config:
    m = ModelConfig(
        use_lora=use_lora,
        audio_model_id=encoder,
        text_model_id=decoder,
        projector_hidden_dim=64,
        projector_pool_stride=stride,
        lora_rank=4,
        lora_alpha=8,
        calibrate_projector=calibrate,
    )
    return Config(model=m, training=TrainingConfig(**training))


def waves(lengths=(16000, 9000), seed=0):
    rng = np.random.default_rng(seed)
    return [(0.1 * rng.standard_normal(n)).astype(np.float32) for n in lengths]


def batch(model, clips, transcripts=("hello world", "the cat sat"), weight=None) -> dict:
    feats, mask = model.features(clips)
    rows, labels = [], []
    for w, t in zip(clips, transcripts):
        n = model.family.audio_token_count(len(w), model.cfg.projector_pool_stride)
        p = text.prompt_ids(model.tokenizer, n, model.cfg.prompt, model.cfg.audio_token)
        tg = text.target_ids(model.tokenizer, t)
        rows.append(p + tg)
        labels.append([-100] * len(p) + tg)
    width = max(map(len, rows))
    pad = model.tokenizer.pad_token_id
    return {
        "input_features": feats,
        "feature_mask": mask,
        "input_ids": torch.tensor([r + [pad] * (width - len(r)) for r in rows]),
        "attention_mask": torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows]),
        "labels": torch.tensor([r + [-100] * (width - len(r)) for r in labels]),
        "weight": torch.ones(len(clips)) if weight is None else torch.tensor(weight, dtype=torch.float32),
    }


def snapshot(model) -> dict:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def train_steps(model, tcfg, b, steps=2):
    opt = torch.optim.AdamW(model.parameter_groups(tcfg))
    model.train()
    for _ in range(steps):
        opt.zero_grad()
        model(**b).loss.backward()
        opt.step()
    return model


def trained_looking(encoder, decoder, bf16=True, lora_std=0.5, model_dtype=None, **training):
    """A tiny twin whose adapter and projector are not at their init (LoRA B is zero at init, which
    would hide a lost adapter) and whose decoder does not end its turn at once (empty transcripts
    would hide any difference)."""
    import torch

    from speechlm.model.build import build_model

    torch.manual_seed(0)
    cfg = tiny_config(decoder=decoder, encoder=encoder, bf16=bf16, **training)
    cfg.model.model_dtype = model_dtype or cfg.model.model_dtype
    m = build_model(cfg)
    with torch.no_grad():
        for n, p in m.decoder.named_parameters():
            if "lora_B" in n:
                p.normal_(0, lora_std)
        m._base_lm().get_output_embeddings().weight[text.end_of_turn_id(m.tokenizer)] = 0
    m.cfg.max_new_tokens = 10
    return m
