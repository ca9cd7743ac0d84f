"""Production precision on the tiny twin: the same dtypes, freeze flags and ZeRO stages as a real run.

Where each dtype lives (docs/design.md): frozen encoder and decoder stored in bf16 (every tensor of
the encoder, its BatchNorm statistics included, in one dtype); DeepSpeed's bf16 mode computes in
bf16 and keeps the trainables' (projector, LoRA) fp32 masters in the optimizer, so an update too
small for bf16 is not rounded away; the export writes those fp32 masters.
"""

from __future__ import annotations

import pytest
import torch

from speechlm import config as config_mod
from speechlm.config import Config, ConfigError
from speechlm.model import save_pretrained
from speechlm.train import engine as engine_mod
from speechlm.train import optim

# every key that sets precision, what trains, how ZeRO partitions, or how clips are augmented: a twin
# may change sizes, data, steps and learning rates, never these
PRODUCTION_KEYS = [
    "training.bf16",
    "model.model_dtype",
    "model.projector_dtype",
    "model.use_lora",
    "model.lora_target_modules",
    "model.lora_dropout",
    "model.calibrate_projector",
    "training.freeze_audio_encoder",
    "training.freeze_language_model",
    "training.freeze_text_embed_tokens",
    "training.freeze_projector",
    "training.gradient_checkpointing",
    "training.attn_implementation",
    "deepspeed.zero_stage",
    "deepspeed.offload",
    "deepspeed.config",
    # the twin augments exactly as production does (issue #21): the resume tests run it
    "data.augment",
]


def get(cfg, key):
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


@pytest.mark.parametrize("recipe", ["tiny"])
def test_twin_recipe_runs_production_settings(recipe):
    prod = config_mod.load(Config, "production", None, [])
    twin = config_mod.load(Config, recipe, None, [])
    differ = {k: (get(prod, k), get(twin, k)) for k in PRODUCTION_KEYS if get(prod, k) != get(twin, k)}
    assert not differ, f"the {recipe} twin differs from production in settings, not just size: {differ}"
    assert prod.training.bf16 and prod.model.model_dtype == "bfloat16" and prod.model.projector_dtype == "float32"


def test_bf16_with_an_fp32_model_is_refused_with_the_key():
    with pytest.raises(ConfigError, match="model.model_dtype"):
        config_mod.load(Config, "tiny", None, ["model.model_dtype=float32"])
    # fp32 end to end stays available (and is what a GPU without bf16 falls back to)
    cfg = config_mod.load(Config, "tiny", None, ["training.bf16=false", "model.model_dtype=float32"])
    assert not cfg.training.bf16


def _engine(stage: int, lr: float):
    from transformers import set_seed

    from speechlm.model import build_model

    cfg = config_mod.load(
        Config,
        "tiny",
        None,
        [
            f"deepspeed.zero_stage={stage}",
            "training.per_device_train_batch_size=2",
            "training.warmup_steps=0",
            f"training.learning_rate={lr}",
            f"training.decoder_learning_rate={lr}",
            "training.weight_decay=0",
            "training.projector_weight_decay=0",
            "model.calibrate_projector=false",
        ],
    )
    set_seed(0)
    model = build_model(cfg)
    opt = optim.build_optimizer(model, cfg.training)
    sched = optim.build_scheduler(opt, cfg.training, 10)
    return engine_mod.build_engine(model, opt, sched, engine_mod.build_ds_config(cfg, 1)), model


@pytest.mark.parametrize("stage", [2, 3])
def test_bf16_engine_frozen_encoder_one_dtype_and_fp32_masters(dist_world, stage, tmp_path):
    from deepspeed.utils import safe_get_full_fp32_param

    from tests.model_helpers import batch, waves

    # Adam's first update is ~lr per element: 1e-6 is far below bf16's spacing near the weights (~1e-3)
    lr = 1e-6
    engine, model = _engine(stage, lr)
    enc_tensors = [t for t in list(model.encoder.parameters()) + list(model.encoder.buffers()) if t.is_floating_point()]
    assert {t.dtype for t in enc_tensors} == {torch.bfloat16}  # BatchNorm statistics included (the crash of #14)
    bn = [m for m in model.encoder.modules() if isinstance(m, torch.nn.BatchNorm1d)]
    assert bn, "the tiny encoder should have its conv BatchNorm"
    stats = [(m.running_mean.clone(), m.running_var.clone()) for m in bn]

    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(n.startswith("projector.") or "lora_" in n for n, _ in trainable)
    assert all(
        not p.requires_grad
        for n, p in model.named_parameters()
        if n.startswith(("encoder.", "decoder.")) and "lora_" not in n
    )
    before = {n: safe_get_full_fp32_param(p).clone() for n, p in trainable}
    assert all(v.dtype == torch.float32 for v in before.values())  # fp32 masters in the optimizer

    b = batch(model, waves((12000, 8000)))
    engine.train()
    loss = engine(**b).loss
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    engine.backward(loss)
    engine.step()

    moved = lost_in_bf16 = 0
    for n, p in trainable:
        after = safe_get_full_fp32_param(p)
        delta = (after - before[n]).abs()
        assert delta.max() <= 2 * lr, n  # the fp32 master took Adam's tiny step
        # where |w| >= 1e-3 bf16's spacing (>= 3.8e-6) exceeds the step: a bf16 copy would not have moved
        # (LoRA's B starts at zero, where bf16 can hold the step, so those elements are left out)
        big = (before[n].abs() >= 1e-3) & (delta > 0)
        moved += int(big.sum())
        lost_in_bf16 += int((big & (after.bfloat16() == before[n].bfloat16())).sum())
    assert moved > 1000
    assert lost_in_bf16 > 0.9 * moved, "updates below bf16 resolution must survive in the fp32 masters"
    # the export writes the fp32 masters, not the bf16 copies the module computes with
    from safetensors.torch import load_file

    save_pretrained(model, tmp_path / "export")
    proj = {k.removeprefix("projector."): v for k, v in load_file(tmp_path / "export" / "model.safetensors").items()}
    adapter = load_file(tmp_path / "export" / "adapter" / "adapter_model.safetensors")
    masters = {n: safe_get_full_fp32_param(p) for n, p in trainable}
    for k, v in proj.items():
        if k == "ctc_blank":  # a buffer: no master
            continue
        assert v.dtype == torch.float32 and torch.equal(v, masters["projector." + k]), k
    assert adapter and all(v.dtype == torch.float32 for v in adapter.values())
    lora_masters = {n.replace(".default", ""): m for n, m in masters.items() if "lora_" in n}
    for k, v in adapter.items():
        match = [m for n, m in lora_masters.items() if n.endswith(k.split("base_model.model.", 1)[-1])]
        assert len(match) == 1 and torch.equal(v, match[0]), k
    # the frozen encoder stays in eval mode: BatchNorm statistics never move (pitfall 12)
    assert not model.encoder.training
    for m, (mean, var) in zip(bn, stats):
        assert torch.equal(m.running_mean, mean) and torch.equal(m.running_var, var)


def test_gpu_without_bf16_falls_back_to_fp32_in_one_line(caplog):
    cfg = config_mod.load(Config, "tiny", None, [])
    with caplog.at_level("WARNING"):
        out = engine_mod.resolve_precision(cfg, bf16_supported=False, device_name="Tesla T4")
    assert (out.training.bf16, out.model.model_dtype) == (False, "float32")
    assert out.model.projector_dtype == "float32"
    lines = [r.getMessage() for r in caplog.records if "bf16" in r.getMessage()]
    assert len(lines) == 1 and "Tesla T4" in lines[0] and "fp32" in lines[0]
    # a device with bf16 keeps the recipe as it is
    assert engine_mod.resolve_precision(cfg, bf16_supported=True, device_name="H100") is cfg
