"""Size a run before paying for it: parameters, GPU memory per device, disk, GPUs that fit.

    make_plan(cfg, world) -> the plan (a dict); report(plan) -> its text; recommend(plan) -> a GPU
    (`speechlm plan`, speechlm/commands/plan.py, prints them)

Nothing is downloaded but config.json files and safetensors headers. Shapes come from the
SpeechLM the config trains, built on the meta device by the trainer's own builders
(speechlm.model.meta: the parts from their configs -- a local dir, the tiny twin, the Hub's
config.json when reachable, else the real configs bundled in `speechlm/model/configs/` -- then
`assemble` with the freeze flags and LoRA settings), so T and F below are the built model's
`requires_grad` counts; with the Hub reachable, `get_safetensors_metadata` also gives the
checkpoints' exact parameter counts and download sizes.

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

Disk (speechlm.plan.disk): light checkpoints (trained weights fp32 + tokenizer, DeepSpeed module state
in the training dtype + 12 B of Adam state per trainable parameter, trainer state) x (save_total_limit
+ the one being written), and the final folder written once (every weight) beside the Hub cache.

Calibration: the constants were fitted once by counting the bytes autograd saves (saved-tensor
hooks, parameters excluded) in one forward of small Qwen3 / Qwen3.5 decoders with LoRA all-linear
(hidden 64-256, head_dim 16-128, 64-512 tokens: exactly linear in tokens, no constant term).
With flash-linear-attention installed the linear-attention term shrinks (not measurable here).
tests/plan/test_plan.py checks the tiny twin's saved activations, its forward+backward peak and its
whole-step peak (measured on CPU with the torch profiler) against this plan, each within 20%,
with and without gradient checkpointing.
"""

from __future__ import annotations

import os

from speechlm.config import Config, ConfigError
from speechlm.model.build import make_loss
from speechlm.model.loss import ChunkedCrossEntropy
from speechlm.plan.auto import ENV, device_memory_gib, pick, target_clips
from speechlm.plan.disk import (  # noqa: F401  (re-exported)
    DTYPE_BYTES,
    ENV_GIB,
    FLAC_BYTES_PER_SECOND,
    GIB,
    checkpoint_facts,
    data_facts,
    disk,
    hub_files_bytes,
)
from speechlm.plan.memory import (  # noqa: F401  (re-exported)
    CATALOG,
    CUDA_OVERHEAD_GIB,
    FRAGMENTATION,
    GPU,
    LOGIT_BYTES,
    MAX_CLIP_SECONDS,
    PROMPT_TOKENS,
    TEXT_TOKENS_PER_SECOND,
    USABLE_FRACTION,
    batch_memory,
    clip_tokens,
    fit_batch,
    step_memory,
    worst_clip_seconds,
    zero_memory,
)
from speechlm.plan.models import (  # noqa: F401  (re-exported: the planner's public surface)
    ACT_FACTOR,
    LINEAR_ATTN_CHUNK,
    Shapes,
    _offline,
    encoder_family,
    hub_checkpoint,
    model_shapes,
)

# --------------------------------------------------------------------------- plan + report


def _auto_fits(cfg: Config, shapes: Shapes, world: int, clip: float) -> list[dict]:
    """What per_device_train_batch_size=auto picks on each catalog GPU."""
    fits = []
    for gpu in CATALOG:
        try:
            p = pick(cfg, shapes, gpu.memory_gib, world=world, clip_seconds=clip)
        except ConfigError:
            continue
        fits.append(
            {
                "gpu": gpu.name,
                "runpod_id": gpu.runpod_id,
                "memory_gib": gpu.memory_gib,
                "per_device_train_batch_size": p.micro,
                "gradient_accumulation_steps": p.accumulation,
                "gradient_checkpointing": p.gradient_checkpointing,
                "as_configured": p.accumulation == 1,
            }
        )
    return fits


def make_plan(cfg: Config, world: int = 1) -> dict:
    shapes = model_shapes(cfg)
    data = data_facts(cfg)
    clip = worst_clip_seconds(cfg, data)
    t = cfg.training
    auto = t.per_device_train_batch_size == "auto"
    # with auto, memory is shown for all of a step's clips in one micro batch (no accumulation)
    micro = target_clips(cfg) if auto else t.per_device_train_batch_size
    mem = step_memory(cfg, shapes, batch=micro, world=world, clip_seconds=clip)
    fits = _auto_fits(cfg, shapes, world, clip) if auto else _catalog_fits(cfg, shapes, world, clip, mem["total"])
    return {
        "auto": _device_pick(cfg, shapes, world, clip) if auto else None,
        "config": {
            "audio_model_id": cfg.model.audio_model_id,
            "text_model_id": cfg.model.text_model_id,
            "zero_stage": cfg.deepspeed.zero_stage,
            "offload": cfg.deepspeed.offload,
            "world_size": world,
            "per_device_train_batch_size": t.per_device_train_batch_size,
            "memory_at_batch": micro,
            "gradient_accumulation_steps": "auto" if auto else t.gradient_accumulation_steps,
            "gradient_checkpointing": t.gradient_checkpointing,
            "effective_batch": target_clips(cfg) * world,
            "worst_clip_seconds": clip,
        },
        "params": {k: v for k, v in vars(shapes).items() if k.endswith("_params")},
        "sources": shapes.sources,
        "memory_bytes": mem,
        "disk_bytes": disk(cfg, shapes, data, world),
        "checkpoint": checkpoint_facts(cfg, shapes, world),
        "data_unknown": data["unknown"],
        "kernels_assumed": assumed_kernels(shapes, make_loss(t)),
        "gpus": fits,
    }


def _catalog_fits(cfg: Config, shapes: Shapes, world: int, clip: float, step_total: float) -> list[dict]:
    """Each catalog GPU the configured batch fits (with the accumulation that keeps the effective batch)."""
    fits = []
    for gpu in CATALOG:
        fb = fit_batch(cfg, shapes, gpu, world=world, clip_seconds=clip)
        if fb:
            fits.append(
                {
                    "gpu": gpu.name,
                    "runpod_id": gpu.runpod_id,
                    "memory_gib": gpu.memory_gib,
                    "per_device_train_batch_size": fb[0],
                    "gradient_accumulation_steps": fb[1],
                    "as_configured": step_total <= gpu.memory_gib * GIB * USABLE_FRACTION,
                }
            )
    return fits


def _device_pick(cfg: Config, shapes: Shapes, world: int, clip: float) -> dict | None:
    """What the trainer's auto would pick for SPEECHLM_DEVICE_MEMORY_GIB, when it is set."""
    if not os.environ.get(ENV):
        return None
    p = pick(cfg, shapes, device_memory_gib()[0], world=world, clip_seconds=clip)
    return {
        "device_memory_gib": p.device_gib,
        "per_device_train_batch_size": p.micro,
        "gradient_accumulation_steps": p.accumulation,
        "gradient_checkpointing": p.gradient_checkpointing,
        "why": p.reason,
    }


def assumed_kernels(shapes: Shapes, loss=None) -> dict:
    """The kernel case the memory model assumes; the trainer logs the real one at start."""
    out = {"fused_loss": (loss or ChunkedCrossEntropy()).describe(shapes.vocab_size)}
    if shapes.act_chunked_elems_per_token:
        out["linear_attention"] = "transformers' torch reference kernels (flash-linear-attention not assumed)"
    return out


def _g(x: float) -> str:
    return f"{x / GIB:8.2f} GiB"


def report(plan: dict) -> str:
    c, p, m, d = plan["config"], plan["params"], plan["memory_bytes"], plan["disk_bytes"]
    lines = [
        f"speechlm plan: {c['audio_model_id']} + {c['text_model_id']}  (ZeRO-{c['zero_stage']}"
        f"{' + offload' if c['offload'] else ''}, world size {c['world_size']})",
        f"models from: {', '.join(f'{k} {v}' for k, v in plan['sources'].items())}",
        "",
        "parameters:",
    ]
    lines += [f"  {k[:-7]:<12}{v:>15,}" for k, v in p.items()]
    lines += [
        "",
        f"GPU memory per device at batch {c['memory_at_batch']} of {c['worst_clip_seconds']:.1f} s clips "
        f"({m['tokens_per_device_batch']} tokens):",
    ]
    lines += [f"  {k:<18}{_g(v)}" for k, v in m.items() if k != "tokens_per_device_batch"]
    lines.append("  kernels assumed: " + "; ".join(f"{k}: {v}" for k, v in plan["kernels_assumed"].items()))
    ck = plan["checkpoint"]
    why = {
        "checkpoints": f"  {ck['kept'] + 1} x {ck['bytes'] / GIB:.2f} GiB ({ck['kept_why']}, + the one being written)",
        "final_model": "  every weight, written once at the end",
    }
    lines += ["", "disk:"] + [f"  {k:<18}{_g(v)}{why.get(k, '')}" for k, v in d.items()]
    if plan["data_unknown"]:
        lines.append(
            f"  (shards not built and their sources' size unknown offline, not counted: {', '.join(plan['data_unknown'])})"  # noqa: E501
        )
    return "\n".join(lines + _report_gpus(plan))


def _report_gpus(plan: dict) -> list[str]:
    """The report's GPUs that fit, and what auto picks for a stated device memory."""
    c = plan["config"]
    auto = c["per_device_train_batch_size"] == "auto"
    lines = [
        "",
        f"GPUs that fit (effective batch {c['effective_batch']} kept{'; what per_device_train_batch_size=auto picks' if auto else ''}):",  # noqa: E501
    ]
    for f in plan["gpus"]:
        ckpt = (
            "  gradient_checkpointing=true"
            if f.get("gradient_checkpointing") and not c["gradient_checkpointing"]
            else ""
        )
        lines.append(
            f"  {f['gpu']:<20} runpod '{f['runpod_id']}': per_device_train_batch_size={f['per_device_train_batch_size']}"  # noqa: E501
            f" gradient_accumulation_steps={f['gradient_accumulation_steps']}{ckpt}"
            f"{'  (as configured)' if f['as_configured'] and not auto else ''}"
        )
    if not plan["gpus"]:
        lines.append("  none: lower the batch, raise the ZeRO stage or use deepspeed.offload=true")
    if plan.get("auto"):
        a = plan["auto"]
        lines += [
            "",
            f"auto for SPEECHLM_DEVICE_MEMORY_GIB={a['device_memory_gib']:g}: per_device_train_batch_size="
            f"{a['per_device_train_batch_size']} gradient_accumulation_steps={a['gradient_accumulation_steps']}"
            f" gradient_checkpointing={str(a['gradient_checkpointing']).lower()} ({a['why']})",
        ]
    return lines


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
