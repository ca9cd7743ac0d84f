"""The planner: ZeRO arithmetic by hand, the production default offline, and the tiny twin's
estimate against memory measured on CPU (torch profiler, autograd saved tensors)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from paths import REPO
from speechlm.config import Config, ConfigError, load
from speechlm.plan import batch_memory, disk, make_plan, model_shapes, zero_memory

# the whole-step peak and the saved activations of the tiny twin, plan vs measured
STEP_TOLERANCE = 0.20
ACTIVATION_TOLERANCE = 0.20


# --------------------------------------------------------------------------- ZeRO arithmetic


# frozen F=1000, trainable T=100, world 4; bf16: 2 B weights/grads, 4 B master + 8 B AdamW
@pytest.mark.parametrize(
    "stage,expected",
    [
        (0, {"frozen_weights": 2000, "trainable_weights": 200, "gradients": 200, "optimizer_states": 1200}),
        (1, {"frozen_weights": 2000, "trainable_weights": 200, "gradients": 200, "optimizer_states": 300}),
        (2, {"frozen_weights": 2000, "trainable_weights": 200, "gradients": 50, "optimizer_states": 300}),
        (3, {"frozen_weights": 500, "trainable_weights": 50, "gradients": 50, "optimizer_states": 300}),
    ],
)
def test_zero_partitioning_bf16_by_hand(stage, expected):
    assert zero_memory(1000, 100, stage=stage, world=4) == expected


def test_zero_partitioning_fp32_offload_and_bad_stage():
    # fp32 compute: no separate master copy, AdamW 8 B; world 2 at ZeRO-2
    assert zero_memory(1000, 100, stage=2, world=2, model_bytes=4, compute_bytes=4) == {
        "frozen_weights": 4000,
        "trainable_weights": 400,
        "gradients": 200,
        "optimizer_states": 400,
    }
    assert zero_memory(1000, 100, stage=3, world=2, offload=True)["optimizer_states"] == 0
    with pytest.raises(ConfigError, match="zero_stage"):
        zero_memory(1, 1, stage=4, world=1)


# --------------------------------------------------------------------------- production default


@pytest.fixture(scope="module")
def production_plan():
    r = subprocess.run(
        [sys.executable, "-m", "speechlm.plan", "--json"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_production_default_counts_from_bundled_configs(production_plan):
    p = production_plan["params"]
    # real-architectures.md: encoder 472.9M, Qwen3.5-2B decoder 1,881.8M (meta-device builds)
    assert p["encoder_params"] == 472_928_256 and p["decoder_params"] == 1_881_825_088
    # LoRA r64 on every decoder Linear: 64 * (in + out) each; the projector trains too
    assert p["trainable_params"] == p["lora_params"] + p["projector_params"] > 60_000_000
    assert "bundled" in production_plan["sources"]["decoder"]


def test_production_default_fits_keep_the_effective_batch(production_plan):
    fits = {f["gpu"]: f for f in production_plan["gpus"]}
    assert production_plan["config"]["effective_batch"] == 256
    assert production_plan["config"]["per_device_train_batch_size"] == "auto"
    for f in fits.values():
        assert f["per_device_train_batch_size"] * f["gradient_accumulation_steps"] == 256
    # 256 clips of 19 s in one micro batch fits no single card; bigger cards take bigger micro-batches
    # (a small card turns gradient checkpointing on to get there: test_autobatch)
    assert not fits["H100 SXM 80GB"]["as_configured"]
    assert fits["H200 141GB"]["per_device_train_batch_size"] > fits["H100 SXM 80GB"]["per_device_train_batch_size"]
    assert fits["RTX 4090 24GB"]["gradient_checkpointing"] and not fits["H200 141GB"]["gradient_checkpointing"]
    mem = production_plan["memory_bytes"]
    assert mem["total"] == pytest.approx(
        sum(v for k, v in mem.items() if k not in ("total", "tokens_per_device_batch"))
    )


def test_production_default_prints_a_report():
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "speechlm.plan",
            "training.per_device_train_batch_size=32",
            "training.gradient_accumulation_steps=8",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    for text in (
        "parameters:",
        "GPU memory per device at batch 32",
        "disk:",
        "hub_cache",
        "checkpoints",
        "NVIDIA H100 80GB HBM3",
        "per_device_train_batch_size=32 gradient_accumulation_steps=8  (as configured)",
    ):
        assert text in r.stdout


def test_cli_user_mistake_is_one_line_exit_2():
    r = subprocess.run(
        [sys.executable, "-m", "speechlm.plan", "training.per_device_batch=3"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "per_device_batch" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_zero3_world_size_partitions_the_frozen_weights():
    one = make_plan(load(Config, None, None, ["deepspeed.zero_stage=3"]), world=1)["memory_bytes"]
    eight = make_plan(load(Config, None, None, ["deepspeed.zero_stage=3"]), world=8)["memory_bytes"]
    assert eight["frozen_weights"] == pytest.approx(one["frozen_weights"] / 8)
    assert eight["optimizer_states"] == pytest.approx(one["optimizer_states"] / 8)
    assert eight["activations"] == one["activations"]  # per-device batch unchanged


def test_checkpoint_disk_scales_with_save_total_limit():
    cfg = load(Config, None, None, ["training.save_total_limit=1"])
    shapes = model_shapes(cfg)
    data = {"shard_bytes": 0, "max_clip_seconds": None, "unknown": []}
    one = disk(cfg, shapes, data)["checkpoints"]
    cfg.training.save_total_limit = 4
    assert disk(cfg, shapes, data)["checkpoints"] == pytest.approx(one * 5 / 2)  # limit + 1 while saving


# --------------------------------------------------------------------------- tiny twin, measured


def _profile_peak(fn) -> int:
    """Peak bytes allocated above the start while `fn` runs (torch profiler memory events, CPU)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    cur = peak = 0
    for _, nbytes in events:  # frees are negative
        cur += nbytes
        peak = max(peak, cur)
    return peak


def _measure_step(model, batch) -> dict:
    """Bytes measured for one training step: `peak` of the whole step incl. the weights, `dynamic`
    (the forward+backward peak above the weights: activations, logits, gradients), and `saved`
    (what autograd saves in the forward; not meaningful under checkpointing, whose own hooks hide it)."""
    weights = sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    dynamic = _profile_peak(lambda: model(**batch).loss.backward())
    opt.zero_grad(set_to_none=True)

    def step():
        model(**batch).loss.backward()
        opt.step()

    peak = _profile_peak(step)
    opt.zero_grad(set_to_none=True)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in params:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(**batch)
    return {"peak": weights + peak, "dynamic": dynamic, "saved": sum(saved.values())}


# the production structure (frozen encoder and decoder, LoRA all-linear) and everything trained
FROZEN_LORA = [
    "model.use_lora=true",
    "model.lora_rank=8",
    "training.freeze_audio_encoder=true",
    "training.freeze_language_model=true",
    "training.freeze_text_embed_tokens=true",
]
ALL_TRAINED = [
    "model.use_lora=false",
    "training.freeze_audio_encoder=false",
    "training.freeze_language_model=false",
    "training.freeze_text_embed_tokens=false",
]


@pytest.mark.parametrize("checkpointing", [False, True], ids=["no-checkpointing", "checkpointing"])
@pytest.mark.parametrize("structure", [FROZEN_LORA, ALL_TRAINED], ids=["frozen+lora", "all-trained"])
def test_tiny_plan_matches_measured_cpu_step(synthetic_shards, structure, checkpointing):
    from speechlm.model import build_model
    from speechlm.train.inputs import make_loaders

    cfg = load(
        Config,
        "tiny",
        None,
        [
            f"data.train=[{{path: {synthetic_shards}, split: train}}]",
            "data.eval=[]",
            "training.per_device_train_batch_size=16",
            "data.num_workers=0",
            *structure,
            f"training.gradient_checkpointing={str(checkpointing).lower()}",
            # fp32 on purpose: on CPU, bf16 autocast caches bf16 copies of the fp32
            # trainables and transformers' reference linear-attention kernels compute in
            # fp32 whatever the input, so CPU bytes say little about a bf16 GPU step
            "training.bf16=false",
            "model.model_dtype=float32",
        ],
    )
    torch.manual_seed(0)
    model = build_model(cfg)
    model.train()
    train, _ = make_loaders(cfg, model, 0, 1)
    batch = next(iter(train))
    measured = _measure_step(model, batch)

    shapes = model_shapes(cfg)
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert shapes.trainable_params == n_trainable
    assert shapes.frozen_params == sum(p.numel() for p in model.parameters() if not p.requires_grad)
    # the measured step is a plain torch step on one process: ZeRO-0 accounting, no CUDA runtime
    cfg.deepspeed.zero_stage = 0
    plan = batch_memory(
        cfg,
        shapes,
        world=1,
        batch=batch["input_ids"].shape[0],
        seq_len=batch["input_ids"].shape[1],
        label_tokens=int((batch["labels"] != -100).sum()),
        audio_seconds=batch["input_features"].shape[0] * batch["input_features"].shape[1] / 50,
        device="cpu",
    )
    assert plan["runtime_overhead"] == 0
    dynamic = plan["activations"] + plan["logits"] + plan["gradients"]
    print(
        f"plan vs measured ({'with' if checkpointing else 'without'} checkpointing): step peak "
        f"{plan['total'] / measured['peak'] - 1:+.1%}, forward+backward {dynamic / measured['dynamic'] - 1:+.1%}"
        + ("" if checkpointing else f", saved activations {plan['activations'] / measured['saved'] - 1:+.1%}")
    )
    assert abs(plan["total"] / measured["peak"] - 1) < STEP_TOLERANCE, (plan, measured)
    assert abs(dynamic / measured["dynamic"] - 1) < STEP_TOLERANCE, (plan, measured)
    if not checkpointing:
        assert abs(plan["activations"] / measured["saved"] - 1) < ACTIVATION_TOLERANCE, (plan["activations"], measured)
