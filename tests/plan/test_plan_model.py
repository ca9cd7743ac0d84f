"""The planner reads the model: its counts come from the SpeechLM the trainer builds (speechlm.model.meta),
so every freeze flag and LoRA setting counts as in training; and its checkpoint disk figure.

Each case builds the tiny twin for real (`build_model`: weights loaded, tokenizer, LoRA) and checks
the planner's figures against that model's `requires_grad` parameters."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from speechlm.config import Config, ConfigError, load
from speechlm.model import build_model, hfconfig, ids
from speechlm.model.meta import meta_speechlm
from speechlm.plan import checkpoint_facts, disk, make_plan, model_shapes
from speechlm.plan.disk import (
    DS_FILES_BYTES,
    MODEL_FILES_BYTES,
    STATE_BYTES,
    STATE_BYTES_PER_RANK,
    UNLIMITED_SAVES,
)

NO_CALIBRATION = ["model.calibrate_projector=false"]  # calibration moves no requires_grad flag
FLAGS = {
    "production flags": [],
    "encoder trains": ["training.freeze_audio_encoder=false"],
    "projector frozen": ["training.freeze_projector=true"],
    "embed_tokens train with LoRA": ["training.freeze_text_embed_tokens=false"],
    "whole decoder": ["model.use_lora=false", "training.freeze_language_model=false"],
    "whole decoder and embed_tokens": [
        "model.use_lora=false",
        "training.freeze_language_model=false",
        "training.freeze_text_embed_tokens=false",
    ],
    "no LoRA, projector only": ["model.use_lora=false"],
    "LoRA rank 3 on q and v": ["model.lora_rank=3", "model.lora_target_modules=[q_proj,v_proj]"],
    "model.use_lora false": ["model.use_lora=false", "training.freeze_text_embed_tokens=false"],
    "whisper encoder trains": [
        "model.audio_model_id=tiny/whisper",
        "model.text_model_id=tiny/qwen3",
        "training.freeze_audio_encoder=false",
    ],
}


def _trained(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _frozen_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters() if not p.requires_grad)


@pytest.mark.parametrize("overrides", FLAGS.values(), ids=FLAGS.keys())
def test_planner_counts_what_the_built_model_trains(overrides):
    cfg = load(Config, "tiny", None, NO_CALIBRATION + overrides)
    built = build_model(cfg)
    shapes = model_shapes(cfg)
    assert shapes.trainable_params == _trained(built)
    assert shapes.frozen_params == sum(p.numel() for p in built.parameters()) - _trained(built)
    assert shapes.frozen_bytes == _frozen_bytes(built)  # the final folder's frozen weights, as stored
    counts = built.parameter_counts()
    planned = (shapes.encoder_params, shapes.projector_params, shapes.decoder_params, shapes.lora_params)
    assert planned == tuple(counts[k][0] for k in ("encoder", "projector", "decoder", "lora"))
    assert shapes.encoder_trained == built.trainable["encoder"]
    # the meta build is the same model: every parameter by name, shape and requires_grad
    meta = meta_speechlm(cfg)
    described = lambda m: {n: (tuple(p.shape), p.requires_grad) for n, p in m.named_parameters()}  # noqa: E731
    assert described(meta) == described(built)


def test_each_flag_changes_the_count():
    """The cases above are not all one number: the flags reach the planner."""
    counts = {
        name: model_shapes(load(Config, "tiny", None, NO_CALIBRATION + ov)).trainable_params
        for name, ov in FLAGS.items()
        if "whisper" not in name
    }
    assert len(set(counts.values())) == len(counts), counts


def test_full_finetune_with_lora_is_refused_as_the_trainer_refuses():
    cfg = load(Config, "tiny", None, ["training.freeze_language_model=false"])
    with pytest.raises(ConfigError, match="freeze_language_model=false with LoRA on"):
        model_shapes(cfg)


def test_production_embed_tokens_count_when_they_train():
    """freeze_text_embed_tokens=false with LoRA trains Qwen3.5-2B's 248,320 x 2,048 embedding table
    (tied to the LM head: counted once), offline from the bundled configs."""
    base = model_shapes(load(Config, None, None, []))
    embed = model_shapes(load(Config, None, None, ["training.freeze_text_embed_tokens=false"]))
    assert embed.trainable_params - base.trainable_params == 248_320 * 2_048
    assert embed.frozen_params + embed.trainable_params == base.frozen_params + base.trainable_params
    assert base.trainable_params == base.lora_params + base.projector_params


def test_bundled_config_builds_the_model_the_local_checkpoint_builds(tmp_path, monkeypatch):
    """A hub id that is not on this machine builds from its bundled config: the same parameters
    (names, shapes, ties) as the checkpoint it describes."""
    local = ids.resolve("tiny/qwen3_5")
    bundled = tmp_path / "acme--tiny-qwen.json"
    bundled.write_text(Path(local, "config.json").read_text())
    monkeypatch.setattr(hfconfig, "CONFIG_DIR", tmp_path)
    flags = ["training.freeze_text_embed_tokens=false"]
    from_dir = meta_speechlm(load(Config, "tiny", None, flags))
    from_bundled = meta_speechlm(load(Config, "tiny", None, flags + ["model.text_model_id=acme/tiny-qwen"]))
    described = lambda m: {n: (tuple(p.shape), p.requires_grad) for n, p in m.named_parameters()}  # noqa: E731
    assert described(from_bundled) == described(from_dir)
    assert hfconfig.config_source("acme/tiny-qwen") == "bundled acme--tiny-qwen.json"
    with pytest.raises(ConfigError, match="none is bundled"):
        meta_speechlm(load(Config, "tiny", None, ["model.text_model_id=acme/not-bundled"]))


# --------------------------------------------------------------------------- checkpoint disk


def _tokenizer_files_bytes(model_id: str) -> int:
    d = ids.resolve(model_id)
    return sum(
        os.path.getsize(os.path.join(d, f))
        for f in os.listdir(d)
        if f.startswith(("tokenizer", "chat_template", "vocab", "merges", "special_tokens", "added_tokens"))
    )


@pytest.mark.parametrize("bf16", [True, False])
def test_checkpoint_bytes_by_formula_on_the_tiny_twin(bf16):
    ov = NO_CALIBRATION + ([] if bf16 else ["training.bf16=false", "model.model_dtype=float32"])
    cfg = load(Config, "tiny", None, ov)
    built = build_model(cfg)
    shapes = model_shapes(cfg)
    t = _trained(built)
    tok = _tokenizer_files_bytes("tiny/qwen3_5")
    assert tok > 20_000  # tokenizer.json, its config and the chat template, as written on disk
    world = 4
    facts = checkpoint_facts(cfg, shapes, world)
    other = MODEL_FILES_BYTES + DS_FILES_BYTES + STATE_BYTES + 4 * STATE_BYTES_PER_RANK
    # model/: trained weights fp32 + tokenizer; ds/: trainable in the training dtype + 12 B of Adam state
    assert facts["bytes"] == 4 * t + tok + (2 if bf16 else 4) * t + 12 * t + other
    assert facts["tokenizer"] == "its files"
    # the final folder: every frozen weight as stored (bf16 bases, or fp32), the trained ones fp32
    assert facts["final_model_bytes"] == _frozen_bytes(built) + 4 * t + tok + MODEL_FILES_BYTES
    data = {"shard_bytes": 0, "max_clip_seconds": None, "unknown": []}
    d = disk(cfg, shapes, data, world)
    assert cfg.training.save_total_limit == 2 and facts["kept"] == 2
    assert d["checkpoints"] == facts["bytes"] * 3  # 2 kept + the one being written
    assert d["final_model"] == facts["final_model_bytes"]
    assert d["total"] == sum(v for k, v in d.items() if k != "total")


def test_checkpoint_count_without_a_limit():
    cfg = load(Config, "tiny", None, ["training.save_total_limit=null", "training.max_steps=250"])
    shapes = model_shapes(cfg)
    facts = checkpoint_facts(cfg, shapes)
    assert facts["kept"] == math.ceil(250 / cfg.training.save_steps) == 3
    cfg.training.max_steps = -1
    assert checkpoint_facts(cfg, shapes)["kept"] == UNLIMITED_SAVES


def test_production_checkpoint_is_light_and_the_final_folder_whole():
    """The production default offline: a checkpoint is the trained 80M parameters' weights and
    Adam state (about 1.4 GB), not the frozen 2.4B; the final folder holds those in bf16."""
    plan = make_plan(load(Config, None, None, []))
    p, ck = plan["params"], plan["checkpoint"]
    t = p["trainable_params"]
    assert ck["tokenizer"] == "estimate for Qwen"  # no Qwen tokenizer on this machine
    assert ck["bytes"] == pytest.approx(18 * t, rel=0.01) and ck["bytes"] < 1.5e9
    frozen_bf16 = 2 * (p["encoder_params"] + p["decoder_params"])
    assert plan["disk_bytes"]["final_model"] == pytest.approx(frozen_bf16 + 4 * t, rel=0.01)
    assert plan["disk_bytes"]["checkpoints"] == ck["bytes"] * (3 + 1)
    json.dumps(plan)  # the --json output stays serialisable
