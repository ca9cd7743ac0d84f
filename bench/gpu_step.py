#!/usr/bin/env python
"""Training-step benchmark of the real default model with random weights, under DeepSpeed.

    python bench/gpu_step.py [--steps 10] [--batch 32] [--zero 2]        # one H100/H200, < 10 min
    OMP_NUM_THREADS=2 python bench/gpu_step.py --cpu-small               # reduced size, on CPU

Builds Granite Speech 5 (470M encoder) + projector 4096 + Qwen3.5-2B with LoRA r64 all-linear from
the bundled real configs (no download) through the model's own `assemble`, wraps it in the
trainer's DeepSpeed engine (ZeRO stage, bf16, AdamW groups), and runs steps on synthetic clips of
realistic lengths (log-normal around 8 s, capped at 19 s; ~2.5 words/s transcripts) batched by the
real Collator. Reports the kernel set it ran with (attention, linear attention, causal conv1d,
fused loss), step time, clips/s, audio hours per GPU-hour, MFU, and peak memory against
the planner's prediction for the same batch. `--cpu-small` shrinks every width and depth (same
architecture types) so the path can be exercised on a laptop.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from speechlm import plan as planner  # noqa: E402
from speechlm import text  # noqa: E402
from speechlm.config import Config, load  # noqa: E402
from speechlm.model import ids  # noqa: E402
from speechlm.model.hfconfig import load_config, text_config  # noqa: E402
from speechlm.model.kernels import kernel_report  # noqa: E402

WORDS = "the quick brown fox jumps over a lazy dog while seven bright stars shine above quiet hills".split()
SMALL = {  # --cpu-small: the same model types at a size a 2-core CPU steps in seconds
    "encoder": {
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "intermediate_size": 1024,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "head_dim": 64,
    },
    "decoder": {
        "hidden_size": 512,
        "intermediate_size": 1536,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "linear_num_key_heads": 4,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 64,
        "linear_value_head_dim": 64,
        "vocab_size": 32000,
    },
}


def model_dirs(cfg: Config, small: bool, tmp: Path) -> tuple[str, str]:
    """Config-only model dirs (the bundled real shapes, or shrunk ones) for building and planning."""
    out = []
    for part, mid in (("encoder", cfg.model.audio_model_id), ("decoder", cfg.model.text_model_id)):
        c = (
            copy.deepcopy(planner.encoder_family(mid).config)  # the cached family's stays as it is
            if part == "encoder"
            else text_config(load_config(mid, cfg.model.trust_remote_code, allow_bundled=True))
        )
        if small:
            for k, v in SMALL[part].items():
                setattr(c, k, v)
            if part == "decoder":
                c.layer_types = ["linear_attention", "linear_attention", "linear_attention", "full_attention"]
        c.save_pretrained(tmp / part)
        out.append(str(tmp / part))
    return out[0], out[1]


def build(cfg: Config, device: torch.device):
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    from speechlm.model.build import assemble, trainable_parts
    from speechlm.model.encoders import family_from_config

    dtype = torch.bfloat16 if cfg.training.bf16 else torch.float32
    with device:  # random init straight on the device
        enc = AutoModel.from_config(AutoConfig.from_pretrained(cfg.model.audio_model_id), dtype=dtype)
        dec = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(cfg.model.text_model_id), dtype=dtype)
    # the tiny tokenizer gives real conversations; its ids are all < the real vocabulary
    tok = text.load_tokenizer(ids.resolve("tiny/qwen3_5"), cfg.model.audio_token)
    family = family_from_config(enc.config, cfg.model.audio_model_id)
    model = assemble(cfg, enc, dec, tok, trainable_parts(cfg.model, cfg.training), family)
    return model.to(device), tok


def synthetic_batches(cfg, tok, n: int, batch: int, seed: int = 0) -> list[dict]:
    from speechlm.data import Collator
    from speechlm.model.encoders import family_for

    coll = Collator.from_config(cfg, tok, family=family_for(cfg.model.audio_model_id))
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        secs = np.clip(rng.lognormal(np.log(8.0), 0.5, batch), 1.0, planner.MAX_CLIP_SECONDS)
        secs.sort()  # length bucketing groups similar lengths
        samples = [
            {
                "id": f"c{i}",
                "audio": (0.1 * rng.standard_normal(int(s * 16000))).astype(np.float32),
                "text": " ".join(rng.choice(WORDS, max(1, int(s * 2.5)))),
            }
            for i, s in enumerate(secs)
        ]
        out.append(coll(samples))
    return out


def step_flops(shapes, batch: dict, enc_frames: int) -> float:
    """Model FLOPs of one step: decoder forward + backward to the activations (its weights are
    frozen: 4 N per token), the frozen encoder forward (2 N per frame), logits at labels (6 h V)."""
    tokens = int(batch["attention_mask"].sum())
    labels = int((batch["labels"] != -100).sum())
    dec_body = shapes.decoder_params - shapes.vocab_size * shapes.decoder_hidden
    return (
        4 * (dec_body + shapes.lora_params + shapes.projector_params) * tokens
        + 2 * shapes.encoder_params * enc_frames
        + 6 * shapes.decoder_hidden * shapes.vocab_size * labels
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=None, help="clips per step (default 32 on GPU, 2 on CPU)")
    ap.add_argument("--zero", type=int, default=2)
    ap.add_argument("--cpu-small", action="store_true", help="reduced size, runs on CPU")
    ap.add_argument("--json", default=None, help="also write the results here")
    a = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cuda = torch.cuda.is_available() and not a.cpu_small
    batch = a.batch or (32 if cuda else 2)
    tmp = Path(tempfile.mkdtemp(prefix="gpu_step-"))
    base = load(Config, None, None, [])
    enc_dir, dec_dir = model_dirs(base, a.cpu_small, tmp)
    over = [
        f"model.audio_model_id={enc_dir}",
        f"model.text_model_id={dec_dir}",
        f"deepspeed.zero_stage={a.zero}",
        f"training.per_device_train_batch_size={batch}",
        "training.gradient_accumulation_steps=1",
        f"training.bf16={'true' if cuda else 'false'}",
        f"model.model_dtype={'bfloat16' if cuda else 'float32'}",
    ]
    if a.cpu_small:
        over.append("model.projector_hidden_dim=1024")
    cfg = load(Config, None, None, over)

    from speechlm.train import engine as engine_mod
    from speechlm.train import optim

    rank, world, device = engine_mod.init_distributed()
    model, tok = build(cfg, device)
    opt = optim.build_optimizer(model, cfg.training)
    sched = optim.build_scheduler(opt, cfg.training, a.steps + a.warmup)
    engine = engine_mod.build_engine(model, opt, sched, engine_mod.build_ds_config(cfg, world))
    engine.train()
    kernels = kernel_report(model, device)  # after the engine: ZeRO-3 partitioning decides the loss kernel
    if rank == 0:
        print(kernels.line(), *kernels.warnings, sep="\n", flush=True)
    batches = synthetic_batches(cfg, tok, a.steps + a.warmup, batch)
    shapes = planner.model_shapes(cfg)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    times, flops, audio = [], 0.0, 0.0
    for i, b in enumerate(batches):
        if i == a.warmup and cuda:
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        inputs = {k: v.to(device) if torch.is_tensor(v) else v for k, v in b.items()}
        loss = engine(**inputs).loss
        engine.backward(loss)
        engine.step()
        if cuda:
            torch.cuda.synchronize()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
            flops += step_flops(shapes, b, int(b["feature_mask"].sum()))
            audio += float(b["audio_seconds"].sum())
    worst = max(batches, key=lambda b: b["input_ids"].numel())
    pred = planner.batch_memory(
        cfg,
        shapes,
        world=world,
        batch=worst["input_ids"].shape[0],
        seq_len=worst["input_ids"].shape[1],
        label_tokens=int((worst["labels"] != -100).sum()),
        audio_seconds=worst["input_features"].shape[0] * worst["input_features"].shape[1] / 50,
        device="cuda" if cuda else "cpu",
    )
    step = float(np.mean(times))
    gpu = torch.cuda.get_device_name() if cuda else "cpu"
    peak_tflops = next((g.bf16_tflops for g in planner.CATALOG if cuda and g.runpod_id == gpu), None) or next(
        (g.bf16_tflops for g in planner.CATALOG if cuda and g.name.split()[0] in gpu), None
    )
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    res = {
        "device": gpu,
        "world_size": world,
        "zero_stage": a.zero,
        "size": "cpu-small" if a.cpu_small else "real",
        "params": {
            k: getattr(shapes, k) for k in ("encoder_params", "decoder_params", "projector_params", "lora_params")
        },
        "batch": batch,
        "steps": len(times),
        "step_time_s": round(step, 3),
        "clips_per_s": round(batch / step, 2),
        "audio_hours_per_gpu_hour": round(audio / sum(times), 1),
        "model_tflops_per_s": round(flops / sum(times) / 1e12, 3),
        "mfu": round(flops / sum(times) / 1e12 / peak_tflops, 3) if peak_tflops else None,
        # CPU: the weights plus the process's peak RSS growth over the steps (coarse: allocator caching)
        "peak_memory_gib": round(
            (
                torch.cuda.max_memory_allocated()
                if cuda
                else weights + resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss0
            )
            / 2**30,
            3,
        ),
        "planned_gib": round(pred["total"] / 2**30, 3),
        "worst_batch_tokens": int(worst["input_ids"].numel()),
        "loss_last": round(loss.item(), 4),
        "kernels": kernels.as_dict(),
    }
    if rank == 0:
        print(json.dumps(res, indent=1))
        if a.json:
            Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
