"""What the step benches (demo_parts.py, bucket_tokens.py) share: a trainer recipe's model in training mode
with its collator, and a shard set's clips as the collator takes them."""

from __future__ import annotations

from pathlib import Path


def train_model(config: str, overrides: list[str]):
    """(cfg, model in training mode, the real Collator) of a trainer recipe and key=value overrides."""
    from speechlm.config import load
    from speechlm.data import Collator
    from speechlm.model import build_model

    cfg = load(recipe=config, overrides=overrides)
    model = build_model(cfg)
    model.train()
    return cfg, model, Collator.from_config(cfg, model.tokenizer, family=model.family)


def samples(path: str, split: str, clips) -> list[dict]:
    """The collator's samples of `clips` ((id, wave, text) as `inference.dataset_clips` decodes them), with
    the language, task and target text of the clips whose JSON carries them (the multilingual corpus)."""
    from speechlm.demo.multilingual_report import clip_labels

    labels = clip_labels(Path(path), split)
    keys = ("language", "task", "target_text")
    return [
        {"id": cid, "text": ref, "audio": wave, **{k: labels[cid][k] for k in keys if k in labels.get(cid, {})}}
        for cid, wave, ref in clips
    ]
