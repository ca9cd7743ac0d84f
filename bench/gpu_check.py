#!/usr/bin/env python
"""The ten-minute GPU check: the real default on one lent H100/H200, one table.

    python bench/gpu_check.py                    # one CUDA GPU; ~10 min with both kernel variants
    python bench/gpu_check.py --steps 5          # quicker
    python bench/gpu_check.py --vllm             # then the default served through vLLM (bench/gpu_vllm.py;
                                                 # needs `make vllm`, so a machine that reaches the registry)
    SPEECHLM_DEVICE_MEMORY_GIB=1.8 OMP_NUM_THREADS=2 python bench/gpu_check.py --cpu-small --steps 1 --warmup 0
                                                 # the same path at toy size on CPU (no numbers worth keeping)

For each decoder kernel variant -- flash-linear-attention (when installed) and transformers' torch
reference kernels -- a child process (the kernels are chosen when transformers imports Qwen3.5, so
"without" blocks the `fla` import there) does what a production run does on this device:
  1. builds the real-size default (Granite Speech 5 + projector + Qwen3.5-2B, LoRA r64) from the
     bundled configs with random weights (bench/gpu_step.py's builder: nothing is downloaded);
  2. resolves `per_device_train_batch_size: auto` for the device by the plan (speechlm.plan.auto;
     19 s worst-case clips, ZeRO-2, 256 clips per step) and probes the worst case once on the GPU
     (speechlm.train.autobatch.probe, halving on OOM), recording the probe's peak;
  3. runs `--steps` optimizer steps (after `--warmup`) of ZeRO-2 bf16 through the trainer's
     DeepSpeed engine on clips of realistic lengths (log-normal around 8 s, capped at 19 s),
     micro batch x accumulation as picked.
The parent prints one table: the pick, step time, clips/s, audio hours per GPU hour, MFU, peak
memory during the steps vs the planner for the largest batch run, and the worst-case probe's peak
vs the planner's worst case. `--json PATH` also writes the rows.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORST_CLIP_SECONDS = 19.0


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10, help="optimizer steps measured per variant")
    ap.add_argument("--warmup", type=int, default=1, help="optimizer steps run first, not measured")
    ap.add_argument("--cpu-small", action="store_true", help="toy size on CPU: exercises the path only")
    ap.add_argument("--json", default=None, help="also write the rows here")
    ap.add_argument(
        "--vllm", action="store_true", help="also serve the default through vLLM: RTFx at 64 requests (gpu_vllm.py)"
    )
    ap.add_argument("--variant", choices=["fla", "torch"], default=None, help=argparse.SUPPRESS)  # child
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)  # child: where its row goes
    return ap.parse_args(argv)


# --------------------------------------------------------------------------- child: one variant


def run_variant(a) -> dict:
    if a.variant == "torch":
        sys.modules["fla"] = None  # import fla -> ImportError: transformers takes its torch kernels
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu_step
    import torch

    from speechlm import plan as planner
    from speechlm.config import Config, load
    from speechlm.plan.auto import pick
    from speechlm.train import autobatch, optim
    from speechlm.train import engine as engine_mod

    cuda = torch.cuda.is_available() and not a.cpu_small
    tmp = Path(tempfile.mkdtemp(prefix="gpu_check-"))
    enc_dir, dec_dir = gpu_step.model_dirs(load(Config, None, None, []), a.cpu_small, tmp)
    over = [
        f"model.audio_model_id={enc_dir}",
        f"model.text_model_id={dec_dir}",
        "deepspeed.zero_stage=2",
        "training.per_device_train_batch_size=auto",
        f"training.bf16={'true' if cuda else 'false'}",
        f"model.model_dtype={'bfloat16' if cuda else 'float32'}",
    ]
    if a.cpu_small:
        over += ["model.projector_hidden_dim=1024", "training.clips_per_step_per_device=4"]
    cfg = load(Config, None, None, over)
    rank, world, device = engine_mod.init_distributed()
    gib, source = autobatch.device_memory_gib()
    shapes = planner.model_shapes(cfg)
    choice = pick(cfg, shapes, gib, world=world, clip_seconds=WORST_CLIP_SECONDS)
    cfg = autobatch.applied(cfg, choice)
    model, tok = gpu_step.build(cfg, device)
    t0 = time.perf_counter()
    choice = autobatch.probe(cfg, model, choice, device, world)
    cfg = autobatch.applied(cfg, choice)  # the probe may have halved the micro batch
    probe_peak = choice.probe_peak_bytes
    probe_s = time.perf_counter() - t0
    micro, accum = cfg.training.per_device_train_batch_size, cfg.training.gradient_accumulation_steps
    worst_plan = planner.step_memory(cfg, shapes, batch=micro, world=world, clip_seconds=WORST_CLIP_SECONDS)["total"]

    opt = optim.build_optimizer(model, cfg.training)
    sched = optim.build_scheduler(opt, cfg.training, a.steps + a.warmup)
    engine = engine_mod.build_engine(model, opt, sched, engine_mod.build_ds_config(cfg, world))
    engine.train()
    batches = gpu_step.synthetic_batches(cfg, tok, (a.steps + a.warmup) * accum, micro)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times, flops, audio, clips = [], 0.0, 0.0, 0
    for step in range(a.steps + a.warmup):
        t0 = time.perf_counter()
        for b in batches[step * accum : (step + 1) * accum]:
            inputs = {k: v.to(device) if torch.is_tensor(v) else v for k, v in b.items()}
            loss = engine(**inputs).loss
            engine.backward(loss)
            engine.step()
            if step >= a.warmup:
                flops += gpu_step.step_flops(shapes, b, int(b["feature_mask"].sum()))
                audio += float(b["audio_seconds"].sum())
                clips += int(b["input_ids"].shape[0])
        if cuda:
            torch.cuda.synchronize()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    worst = max(batches, key=lambda b: b["input_ids"].numel())
    steps_plan = planner.batch_memory(
        cfg,
        shapes,
        world=world,
        batch=worst["input_ids"].shape[0],
        seq_len=worst["input_ids"].shape[1],
        label_tokens=int((worst["labels"] != -100).sum()),
        audio_seconds=worst["input_features"].shape[0] * worst["input_features"].shape[1] / 50,
        device="cuda" if cuda else "cpu",
    )["total"]
    name = torch.cuda.get_device_name() if cuda else "cpu"
    peak_tflops = next((g.bf16_tflops for g in planner.CATALOG if cuda and g.runpod_id == name), None)
    total = sum(times)
    gib_ = 2**30
    return {
        "variant": a.variant,
        "device": name,
        "device_memory": source,
        "size": "cpu-small" if a.cpu_small else "real",
        "bf16": cfg.training.bf16,
        "clips_per_step": micro * accum,
        "micro_batch": micro,
        "accumulation": accum,
        "gradient_checkpointing": cfg.training.gradient_checkpointing,
        "auto_reason": choice.reason,
        "probe_s": round(probe_s, 1),
        "probe_peak_gib": round(probe_peak / gib_, 2) if probe_peak is not None else None,
        "plan_worst_gib": round(worst_plan / gib_, 2),
        "steps": len(times),
        "step_time_s": round(total / max(1, len(times)), 3),
        "clips_per_s": round(clips / total, 2) if total else None,
        "audio_hours_per_gpu_hour": round(audio / total, 1) if total else None,
        "mfu": round(flops / total / 1e12 / peak_tflops, 3) if peak_tflops and total else None,
        "steps_peak_gib": round(torch.cuda.max_memory_allocated() / gib_, 2) if cuda else None,
        "plan_largest_batch_gib": round(steps_plan / gib_, 2),
        "largest_batch_tokens": int(worst["input_ids"].numel()),
        "loss_last": round(float(loss), 4),
    }


# --------------------------------------------------------------------------- parent: the table

COLUMNS = [
    ("variant", "kernels"),
    ("pick", "auto pick"),
    ("step_time_s", "step s"),
    ("clips_per_s", "clips/s"),
    ("audio_hours_per_gpu_hour", "audio h / GPU h"),
    ("mfu", "MFU"),
    ("steps_peak_gib", "peak GiB (steps)"),
    ("plan_largest_batch_gib", "plan GiB (largest batch)"),
    ("probe_peak_gib", "peak GiB (19 s probe)"),
    ("plan_worst_gib", "plan GiB (19 s)"),
]


def table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(h for _, h in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['variant']} | failed: {r['error']} |")
            continue
        r = {**r, "pick": f"{r['micro_batch']} x {r['accumulation']}{' +ckpt' if r['gradient_checkpointing'] else ''}"}
        lines.append("| " + " | ".join("-" if r.get(k) is None else str(r[k]) for k, _ in COLUMNS) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    a = parse(argv)
    if a.variant:
        row = run_variant(a)
        Path(a.out).write_text(json.dumps(row))
        return 0
    variants = (["fla"] if importlib.util.find_spec("fla") is not None else []) + ["torch"]
    rows = []
    for v in variants:
        out = Path(tempfile.mkdtemp(prefix="gpu_check-")) / "row.json"
        cmd = [
            sys.executable,
            __file__,
            "--variant",
            v,
            "--out",
            str(out),
            "--steps",
            str(a.steps),
            "--warmup",
            str(a.warmup),
        ] + (["--cpu-small"] if a.cpu_small else [])
        r = subprocess.run(cmd, cwd=ROOT, text=True, stderr=subprocess.PIPE)
        if r.returncode != 0 or not out.is_file():
            tail = (r.stderr or "").strip().splitlines()[-1:] or [f"exit {r.returncode}"]
            rows.append({"variant": v, "error": tail[0][:200]})
            continue
        rows.append(json.loads(out.read_text()))
    first = next((r for r in rows if "error" not in r), None)
    if first:
        print(
            f"device: {first['device']} ({first['device_memory']}), size {first['size']}, ZeRO-2 "
            f"{'bf16' if first['bf16'] else 'fp32'}, {first['clips_per_step']} clips/step; auto: {first['auto_reason']}"
        )
    if "fla" not in variants:
        print(
            "flash-linear-attention is not installed: only the torch kernels ran (pip install flash-linear-attention)"
        )
    print(table(rows))
    if a.vllm:  # the default served through vLLM, in its own environment (bench/gpu_vllm.py)
        r = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_vllm.py")], cwd=ROOT, text=True)
        rows.append({"variant": "vllm", "error": f"exit {r.returncode}"} if r.returncode else {"variant": "vllm"})
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
