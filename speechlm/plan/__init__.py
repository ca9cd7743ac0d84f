"""Size a run before paying for it: parameters, GPU memory per device, disk, GPUs that fit.

    python -m speechlm.plan [--config C] [--experiment E] [--world-size N] [--json] [key=value ...]

Nothing is downloaded but config.json files and safetensors headers. Shapes come from the
models' configs built on the meta device (the Hub when reachable, else the real configs bundled
in `speechlm/model/configs/`, or the local dir for the tiny twin); with the Hub reachable,
`get_safetensors_metadata` also gives the checkpoints' exact parameter counts and download sizes.

Memory model, per device (N = world size, T = trainable params, F = frozen params):
  frozen weights  F * bytes(model_dtype)                              / N at ZeRO-3
  trainable       T * bytes(compute)  (the bf16 working copy)         / N at ZeRO-3
  gradients       T * bytes(compute)                                  / N at ZeRO-2, 3
  optimizer       T * (4 fp32 master if bf16, + 8 AdamW m and v)      / N at ZeRO-1, 2, 3
                  (0 on the GPU with optimizer offload: it lives in host RAM)
  activations     tokens * bytes(compute) * sum over decoder layers of ACT_FACTOR * (hidden + the
                  out_features of every Linear in the layer + lora_rank per LoRA-wrapped Linear)
                  -- backward keeps about two copies of each projection's output (attention and
                  MLP inputs, gate/up products, norms) -- plus, for Qwen3.5's linear-attention
                  layers run by transformers' torch kernels, value_heads * (22 * head_dim + 100).
                  The frozen encoder runs without grad: only its transient peak counts (max); a
                  trained encoder's layers count at the frame rate they run at (after subsampling).
                  With training.gradient_checkpointing the decoder layers keep only their input
                  (hidden per token per layer) and the backward recomputes one layer at a time: the
                  largest layer's term once, instead of the sum over layers.
  logits          min(label tokens, chunk) * vocab * LOGIT_BYTES: the loss (speechlm.model.loss)
                  holds one chunk of label logits at a time (their fp32 log-softmax and its fp32
                  gradient at the backward's peak); Liger's fused kernel on CUDA holds less.
  GPU runtime     CUDA context + allocator slack: CUDA_OVERHEAD_GIB + FRAGMENTATION of the rest.
The worst micro-batch is the longest clip (the 19 s cap, or the manifest's longest; train clips slowed
by the smallest data.augment speed factor: 21.1 s at 0.9) times the
per-device batch: length bucketing puts long clips together, so that batch does happen.

With `training.per_device_train_batch_size=auto` (production) the memory is shown for all of a
step's clips in one micro batch, and the GPU list shows what auto picks on each card
(speechlm.plan.auto); with SPEECHLM_DEVICE_MEMORY_GIB set, also the pick for that much memory.

Calibration: the constants were fitted once by counting the bytes autograd saves (saved-tensor
hooks, parameters excluded) in one forward of small Qwen3 / Qwen3.5 decoders with LoRA all-linear
(hidden 64-256, head_dim 16-128, 64-512 tokens: exactly linear in tokens, no constant term).
With flash-linear-attention installed the linear-attention term shrinks (not measurable here).
tests/test_plan.py checks the tiny twin's saved activations, its forward+backward peak and its
whole-step peak (measured on CPU with the torch profiler) against this plan, each within 20%,
with and without gradient checkpointing.
"""
from __future__ import annotations

import argparse
import json
import math
import os
from dataclasses import asdict, dataclass

from speechlm.config import Config, ConfigError, cli_errors, load
from speechlm.model.loss import chunk_tokens
from speechlm.plan.disk import (  # noqa: F401  (re-exported)
    DTYPE_BYTES, ENV_GIB, FLAC_BYTES_PER_SECOND, GIB, data_facts, disk, hub_files_bytes,
)
from speechlm.plan.models import (  # noqa: F401  (re-exported: the planner's public surface)
    ACT_FACTOR, LINEAR_ATTN_CHUNK, Shapes, _offline, _sub_config, bundled_config_path, encoder_family, hub_checkpoint, meta_model,
    model_config, model_shapes,
)

# by compute-dtype bytes, per logit: the backward's peak (saved fp32 log-softmax + the fp32 gradient
# in and out of it); measured 12.0-12.1 for bf16 and fp32 by bench/loss_memory.py (docs/benchmarks.md)
LOGIT_BYTES = {2: 12, 4: 12}
CUDA_OVERHEAD_GIB = 1.5
FRAGMENTATION = 0.10
USABLE_FRACTION = 0.92  # keep this much of a card's memory as the budget
MAX_CLIP_SECONDS = 19.0  # the shard step's cap (pitfall: OOM on long clips)
TEXT_TOKENS_PER_SECOND = 3.5  # English speech ~2.5 words/s at ~1.3 tokens/word, + <|im_end|>
PROMPT_TOKENS = 32  # chat template turns, the prompt, the newline


@dataclass(frozen=True)
class GPU:
    name: str
    runpod_id: str
    memory_gib: float
    bf16_tflops: float  # dense peak, for MFU


CATALOG = [
    GPU("RTX 4090 24GB", "NVIDIA GeForce RTX 4090", 24, 165),
    GPU("L4 24GB", "NVIDIA L4", 24, 121),
    GPU("A40 48GB", "NVIDIA A40", 48, 150),
    GPU("RTX A6000 48GB", "NVIDIA RTX A6000", 48, 155),
    GPU("L40S 48GB", "NVIDIA L40S", 48, 362),
    GPU("RTX 6000 Ada 48GB", "NVIDIA RTX 6000 Ada Generation", 48, 364),
    GPU("A100 80GB", "NVIDIA A100 80GB PCIe", 80, 312),
    GPU("A100 SXM 80GB", "NVIDIA A100-SXM4-80GB", 80, 312),
    GPU("H100 PCIe 80GB", "NVIDIA H100 PCIe", 80, 756),
    GPU("H100 SXM 80GB", "NVIDIA H100 80GB HBM3", 80, 989),
    GPU("H100 NVL 94GB", "NVIDIA H100 NVL", 94, 835),
    GPU("RTX PRO 6000 96GB", "NVIDIA RTX PRO 6000 Blackwell Server Edition", 96, 500),
    GPU("H200 141GB", "NVIDIA H200", 141, 989),
    GPU("B200 180GB", "NVIDIA B200", 180, 2250),
]


# --------------------------------------------------------------------------- memory


def zero_memory(frozen: int, trainable: int, *, stage: int, world: int, model_bytes: int = 2,
                compute_bytes: int = 2, offload: bool = False) -> dict:
    """Bytes per device for weights, gradients and AdamW states under ZeRO `stage` over `world`."""
    if stage not in (0, 1, 2, 3):
        raise ConfigError(f"deepspeed.zero_stage: must be 0, 1, 2 or 3, got {stage}")
    n = max(1, world)
    master = 4 if compute_bytes == 2 else 0  # fp32 master weights only when computing in 16 bit
    return {
        "frozen_weights": frozen * model_bytes / (n if stage == 3 else 1),
        "trainable_weights": trainable * compute_bytes / (n if stage == 3 else 1),
        "gradients": trainable * compute_bytes / (n if stage >= 2 else 1),
        "optimizer_states": 0.0 if offload else trainable * (master + 8) / (n if stage >= 1 else 1),
    }


def clip_tokens(cfg: Config, seconds: float) -> tuple[int, int]:
    """(sequence tokens, label tokens) of one clip of `seconds`."""
    audio = encoder_family(cfg.model.audio_model_id).audio_token_count(int(seconds * 16000), cfg.model.projector_pool_stride)
    labels = math.ceil(seconds * TEXT_TOKENS_PER_SECOND) + 1
    return audio + PROMPT_TOKENS + labels, labels


def step_memory(cfg: Config, shapes: Shapes, *, batch: int, world: int, clip_seconds: float,
                device: str = "cuda") -> dict:
    """Peak bytes per device for a micro-batch of `batch` clips of `clip_seconds` (the worst case)."""
    if cfg.data.batching == "seconds" and cfg.data.batch_seconds > 0:
        batch = max(1, int(cfg.data.batch_seconds // clip_seconds))
    seq, labels = clip_tokens(cfg, clip_seconds)
    return batch_memory(cfg, shapes, world=world, batch=batch, seq_len=seq, label_tokens=batch * labels,
                        audio_seconds=batch * clip_seconds, device=device)


def batch_memory(cfg: Config, shapes: Shapes, *, world: int, batch: int, seq_len: int, label_tokens: int,
                 audio_seconds: float, device: str = "cuda") -> dict:
    """Peak bytes per device for one step on `batch` sequences padded to `seq_len`, `label_tokens`
    label positions in all, and `audio_seconds` (padded) through the encoder."""
    tokens = batch * seq_len
    chunked = batch * -(-seq_len // LINEAR_ATTN_CHUNK) * LINEAR_ATTN_CHUNK
    t = cfg.training
    compute = 2 if t.bf16 else 4
    mem = zero_memory(shapes.frozen_params, shapes.trainable_params, stage=cfg.deepspeed.zero_stage, world=world,
                      model_bytes=2 if (t.bf16 and cfg.model.model_dtype != "float32") else 4,
                      compute_bytes=compute, offload=cfg.deepspeed.offload)
    if t.gradient_checkpointing:
        decoder = (tokens * shapes.ckpt_act_elems_per_token + chunked * shapes.ckpt_act_chunked_elems_per_token) * compute
    else:
        decoder = (tokens * shapes.act_elems_per_token + chunked * shapes.act_chunked_elems_per_token) * compute
    encoder = audio_seconds * shapes.enc_frames_per_second * shapes.enc_act_elems_per_frame * compute
    # a frozen encoder's transient is gone before the decoder's activations pile up; a trained
    # encoder's saved activations stay until the backward reaches them
    mem["activations"] = decoder + encoder if shapes.encoder_trained else max(decoder, encoder)
    mem["logits"] = min(label_tokens, chunk_tokens(shapes.vocab_size)) * shapes.vocab_size * LOGIT_BYTES[compute]
    dynamic = sum(mem.values())
    mem["runtime_overhead"] = (CUDA_OVERHEAD_GIB * GIB + FRAGMENTATION * dynamic) if device == "cuda" else 0.0
    mem["total"] = dynamic + mem["runtime_overhead"]
    mem["tokens_per_device_batch"] = tokens
    return mem


def fit_batch(cfg: Config, shapes: Shapes, gpu: GPU, *, world: int, clip_seconds: float) -> tuple[int, int] | None:
    """Largest per-device batch (and accumulation) that fits `gpu` and keeps the effective batch."""
    t = cfg.training
    effective = t.per_device_train_batch_size * t.gradient_accumulation_steps * world
    budget = gpu.memory_gib * GIB * USABLE_FRACTION
    b = t.per_device_train_batch_size * t.gradient_accumulation_steps
    while b >= 1:
        if effective % (b * world) == 0 and step_memory(cfg, shapes, batch=b, world=world, clip_seconds=clip_seconds)["total"] <= budget:
            return b, effective // (b * world)
        b = b // 2 if b > 1 else 0
    return None


# --------------------------------------------------------------------------- plan + report


def _auto_fits(cfg: Config, shapes: Shapes, world: int, clip: float) -> list[dict]:
    """What per_device_train_batch_size=auto picks on each catalog GPU."""
    from speechlm.plan.auto import pick

    fits = []
    for gpu in CATALOG:
        try:
            p = pick(cfg, shapes, gpu.memory_gib, world=world, clip_seconds=clip)
        except ConfigError:
            continue
        fits.append({"gpu": gpu.name, "runpod_id": gpu.runpod_id, "memory_gib": gpu.memory_gib,
                     "per_device_train_batch_size": p.micro, "gradient_accumulation_steps": p.accumulation,
                     "gradient_checkpointing": p.gradient_checkpointing, "as_configured": p.accumulation == 1})
    return fits


def worst_clip_seconds(cfg: Config, data: dict) -> float:
    """The longest clip a micro batch can hold: the manifests' (data_facts), else the shard step's cap,
    slowed down by the smallest speed-perturbation factor (a 19 s clip at 0.9 is 21.1 s)."""
    return data["max_clip_seconds"] or MAX_CLIP_SECONDS * cfg.data.augment.max_stretch


def make_plan(cfg: Config, world: int = 1) -> dict:
    from speechlm.plan.auto import target_clips

    shapes = model_shapes(cfg)
    data = data_facts(cfg)
    clip = worst_clip_seconds(cfg, data)
    t = cfg.training
    auto = t.per_device_train_batch_size == "auto"
    # with auto, memory is shown for all of a step's clips in one micro batch (no accumulation)
    micro = target_clips(cfg) if auto else t.per_device_train_batch_size
    mem = step_memory(cfg, shapes, batch=micro, world=world, clip_seconds=clip)
    fits = []
    if auto:
        fits = _auto_fits(cfg, shapes, world, clip)
    for gpu in CATALOG if not auto else ():
        fb = fit_batch(cfg, shapes, gpu, world=world, clip_seconds=clip)
        if fb:
            fits.append({"gpu": gpu.name, "runpod_id": gpu.runpod_id, "memory_gib": gpu.memory_gib,
                         "per_device_train_batch_size": fb[0], "gradient_accumulation_steps": fb[1],
                         "as_configured": mem["total"] <= gpu.memory_gib * GIB * USABLE_FRACTION})
    stated = os.environ.get("SPEECHLM_DEVICE_MEMORY_GIB")  # what the trainer's auto would plan for
    device_pick = None
    if auto and stated:
        from speechlm.plan.auto import pick
        from speechlm.train.autobatch import device_memory_gib

        p = pick(cfg, shapes, device_memory_gib()[0], world=world, clip_seconds=clip)
        device_pick = {"device_memory_gib": p.device_gib, "per_device_train_batch_size": p.micro,
                       "gradient_accumulation_steps": p.accumulation,
                       "gradient_checkpointing": p.gradient_checkpointing, "why": p.reason}
    return {
        "auto": device_pick,
        "config": {"audio_model_id": cfg.model.audio_model_id, "text_model_id": cfg.model.text_model_id,
                   "zero_stage": cfg.deepspeed.zero_stage, "offload": cfg.deepspeed.offload, "world_size": world,
                   "per_device_train_batch_size": t.per_device_train_batch_size, "memory_at_batch": micro,
                   "gradient_accumulation_steps": "auto" if auto else t.gradient_accumulation_steps,
                   "gradient_checkpointing": t.gradient_checkpointing,
                   "effective_batch": target_clips(cfg) * world,
                   "worst_clip_seconds": clip},
        "params": {k: v for k, v in asdict(shapes).items() if k.endswith("_params")},
        "sources": shapes.sources,
        "memory_bytes": mem,
        "disk_bytes": disk(cfg, shapes, data),
        "data_unknown": data["unknown"],
        "kernels_assumed": assumed_kernels(shapes),
        "gpus": fits,
    }


def assumed_kernels(shapes: Shapes) -> dict:
    """The kernel case the memory model assumes; the trainer logs the real one at start."""
    out = {"fused_loss": f"chunked torch cross-entropy, {chunk_tokens(shapes.vocab_size)} label tokens of logits "
                         "at a time (an upper bound for Liger's fused kernel)"}
    if shapes.act_chunked_elems_per_token:
        out["linear_attention"] = "transformers' torch reference kernels (flash-linear-attention not assumed)"
    return out


def _g(x: float) -> str:
    return f"{x / GIB:8.2f} GiB"


def report(plan: dict) -> str:
    c, p, m, d = plan["config"], plan["params"], plan["memory_bytes"], plan["disk_bytes"]
    lines = [f"speechlm plan: {c['audio_model_id']} + {c['text_model_id']}  (ZeRO-{c['zero_stage']}"
             f"{' + offload' if c['offload'] else ''}, world size {c['world_size']})",
             f"models from: {', '.join(f'{k} {v}' for k, v in plan['sources'].items())}", "", "parameters:"]
    lines += [f"  {k[:-7]:<12}{v:>15,}" for k, v in p.items()]
    lines += ["", f"GPU memory per device at batch {c['memory_at_batch']} of {c['worst_clip_seconds']:.1f} s clips "
              f"({m['tokens_per_device_batch']} tokens):"]
    lines += [f"  {k:<18}{_g(v)}" for k, v in m.items() if k != "tokens_per_device_batch"]
    lines.append("  kernels assumed: " + "; ".join(f"{k}: {v}" for k, v in plan["kernels_assumed"].items()))
    lines += ["", "disk:"] + [f"  {k:<18}{_g(v)}" for k, v in d.items()]
    if plan["data_unknown"]:
        lines.append(f"  (shards not built and their sources' size unknown offline, not counted: {', '.join(plan['data_unknown'])})")
    auto = c["per_device_train_batch_size"] == "auto"
    lines += ["", f"GPUs that fit (effective batch {c['effective_batch']} kept{'; what per_device_train_batch_size=auto picks' if auto else ''}):"]
    for f in plan["gpus"]:
        ckpt = "  gradient_checkpointing=true" if f.get("gradient_checkpointing") and not c["gradient_checkpointing"] else ""
        lines.append(f"  {f['gpu']:<20} runpod '{f['runpod_id']}': per_device_train_batch_size={f['per_device_train_batch_size']}"
                     f" gradient_accumulation_steps={f['gradient_accumulation_steps']}{ckpt}"
                     f"{'  (as configured)' if f['as_configured'] and not auto else ''}")
    if not plan["gpus"]:
        lines.append("  none: lower the batch, raise the ZeRO stage or use deepspeed.offload=true")
    if plan.get("auto"):
        a = plan["auto"]
        lines += ["", f"auto for SPEECHLM_DEVICE_MEMORY_GIB={a['device_memory_gib']:g}: per_device_train_batch_size="
                  f"{a['per_device_train_batch_size']} gradient_accumulation_steps={a['gradient_accumulation_steps']}"
                  f" gradient_checkpointing={str(a['gradient_checkpointing']).lower()} ({a['why']})"]
    return "\n".join(lines)


def recommend(plan: dict) -> dict | None:
    """The smallest catalog GPU that fits as configured, else the one needing the least accumulation
    (with auto: among those that need no gradient checkpointing the recipe didn't ask for, if any)."""
    fits = plan["gpus"]
    asked = plan["config"].get("gradient_checkpointing", False)
    # recomputing every layer costs about a third more compute: a card that needs it only because it
    # is small is not what a rented run should default to
    unasked = lambda f: bool(f.get("gradient_checkpointing", False)) and not asked  # noqa: E731
    exact = [f for f in fits if f["as_configured"] and not unasked(f)]
    if exact:
        return min(exact, key=lambda f: f["memory_gib"])
    return min(fits, key=lambda f: (unasked(f), f["gradient_accumulation_steps"], f["memory_gib"])) if fits else None


def build_parser(prog: str = "python -m speechlm.plan") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    add_plan_args(ap)
    return ap


def add_plan_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--config", default=None, help="recipe name or YAML path (default: production)")
    ap.add_argument("--experiment", "-e", default=None)
    ap.add_argument("--world-size", type=int, default=int(os.environ.get("WORLD_SIZE", "1")))
    ap.add_argument("--json", action="store_true", help="print the plan as JSON")
    ap.add_argument("overrides", nargs="*", help="key.sub=value")


@cli_errors
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cfg = load(Config, args.config, args.experiment, args.overrides)
    plan = make_plan(cfg, world=args.world_size)
    print(json.dumps(plan, indent=1) if args.json else report(plan))
    return 0
