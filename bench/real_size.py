#!/usr/bin/env python
"""The production default at real size, once, on CPU: train, save, resume, final folder, AutoModel.

    nice -n 5 python bench/real_size.py [--batch 2] [--fp32] [--work DIR] [--json OUT]
    python bench/real_size.py --small            # the same path at gpu_step.py's reduced size: ~2 min

Granite Speech 5 (470M encoder) + projector + Qwen3.5-2B with LoRA r64 all-linear, from the bundled
real configs with random weights (no download: `bench/gpu_step.py`'s `model_dirs` writes the configs,
this script initialises and saves each base as a local model folder, the decoder with the tiny
Qwen3.5 tokenizer, whose ids are all below the real vocabulary). Every step then runs through the
trainer's own code: `speechlm.train.loop.Trainer` on `--config production` with overrides (world
size 1, DeepSpeed ZeRO-2 over gloo, bf16 as production unless --fp32), on a small synthetic shard set.

Phases, each in its own process so that each reports its own peak RSS (VmHWM):
  prepare  random-weight bases + shards + the planner's figures for the same config
  train    run A: 2 optimizer steps, a checkpoint at step 1 and step 2, eval, `<run>/final`
  resume   run B: resumes run A's step-1 checkpoint and runs step 2 (its step-2 loss and weights
           must equal run A's)
  load     `transformers.AutoModel.from_pretrained(final, trust_remote_code=True)`, one clip transcribed
Then the bytes of each checkpoint (model/, DeepSpeed module state, DeepSpeed optimizer state) and of
the final folder. Not a test and not in CI: 20-25 minutes and 13 GiB peak RSS (while writing the final
folder; 9 GiB in training) on a 2-core machine. Figures: docs/benchmarks.md, "Real size on CPU".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ENCODER_NAME = "granite-speech-5.0-470m-random"
DECODER_NAME = "Qwen3.5-2B-random"
SHARD_SIZES = {"train": 8, "eval": 2, "test": 2}  # 2 steps of batch 2, twice over in one epoch
GIB = 2**30


def peak_rss() -> int:
    """This process's peak resident set (VmHWM), bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def du(path: Path) -> int:
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def overrides(work: Path, a) -> list[str]:
    shards = work / "shards"
    over = [
        f"model.audio_model_id={work / 'bases' / ENCODER_NAME}",
        f"model.text_model_id={work / 'bases' / DECODER_NAME}",
        "data.recipe=null",
        f"data.train=[{{path: {shards}, split: train}}]",
        f"data.eval=[{{path: {shards}, split: eval}}]",
        "data.max_eval_samples_per_dataset=2",
        "data.num_workers=1",
        f"training.output_dir={work / 'runs'}",
        f"training.per_device_train_batch_size={a.batch}",
        f"training.per_device_eval_batch_size={a.batch}",
        "training.gradient_accumulation_steps=1",
        "training.max_steps=2",
        "training.save_steps=1",
        "training.save_total_limit=null",
        "training.eval_steps=0",
        "training.logging_steps=1",
        "training.warmup_steps=0",  # production's 1000 would make step 1's update zero: nothing to resume
        "training.report_to=none",
        "training.push_to_hub=false",
    ]
    if a.fp32:
        over += ["training.bf16=false", "model.model_dtype=float32"]
    if a.small:
        over.append("model.projector_hidden_dim=1024")  # as gpu_step.py --cpu-small
    return over


def run_config(work: Path, a, *extra):
    from speechlm.config import Config, load

    return load(Config, "production", None, overrides(work, a) + list(extra))


# --------------------------------------------------------------------------- phases


def prepare(work: Path, a) -> dict:
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

    from bench.gpu_step import model_dirs  # bench/ as a namespace package: the repository root is on the path
    from speechlm import plan as planner
    from speechlm.config import Config, load
    from speechlm.model import ids
    from speechlm.shard import build, load_recipe

    out: dict = {}
    dtype = torch.float32 if a.fp32 else torch.bfloat16
    enc_cfg, dec_cfg = model_dirs(load(Config, "production", None, []), a.small, work / "configs")
    bases = work / "bases"
    t0 = time.perf_counter()
    torch.manual_seed(0)
    enc = AutoModel.from_config(AutoConfig.from_pretrained(enc_cfg), dtype=dtype)
    enc.save_pretrained(bases / ENCODER_NAME)
    del enc
    tiny = ids.resolve("tiny/qwen3_5")
    tok = AutoTokenizer.from_pretrained(tiny)
    cfg = AutoConfig.from_pretrained(dec_cfg)
    cfg.pad_token_id, cfg.eos_token_id, cfg.bos_token_id = tok.pad_token_id, tok.eos_token_id, tok.bos_token_id
    dec = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    dec.save_pretrained(bases / DECODER_NAME)
    tok.save_pretrained(bases / DECODER_NAME)
    del dec
    out["bases_s"] = round(time.perf_counter() - t0, 1)
    out["bases_bytes"] = {ENCODER_NAME: du(bases / ENCODER_NAME), DECODER_NAME: du(bases / DECODER_NAME)}

    t0 = time.perf_counter()
    recipe, _ = load_recipe("synthetic")
    recipe.name = "synthetic"
    for split, n in SHARD_SIZES.items():
        setattr(recipe.sources[0].settings, split, n)
    recipe.sources[0].settings.unseen_test = SHARD_SIZES["test"] // 2
    recipe.output.shard_clips = 4
    recipe.output.work_chunk = 4
    build(recipe, work / "shards", workers=1)
    out["shards_s"] = round(time.perf_counter() - t0, 1)

    cfg = run_config(work, a)
    plan = planner.make_plan(cfg)
    shapes = planner.model_shapes(cfg)
    clip = plan["config"]["worst_clip_seconds"]
    cpu = planner.step_memory(cfg, shapes, batch=a.batch, world=1, clip_seconds=clip, device="cpu")
    keep = (cfg.training.save_total_limit or 10) + 1  # as speechlm.plan.disk counts the checkpoints kept
    out["plan"] = {
        "params": plan["params"],
        "worst_clip_seconds": clip,
        "memory_cuda": plan["memory_bytes"],
        "memory_cpu": cpu,
        "disk": plan["disk_bytes"],
        "checkpoint_bytes": plan["disk_bytes"]["checkpoints"] / keep,
        "hub_cache_bytes": plan["disk_bytes"]["hub_cache"],
    }
    return out


def _trainer_class():
    from speechlm.train.loop import Trainer

    class TimedTrainer(Trainer):
        """The trainer as it is, with the wall time of each save and the peak RSS so far at each
        stage recorded (VmHWM only grows: each figure is the peak up to that point)."""

        saves: dict = {}
        peaks: dict = {}

        def setup(self) -> None:
            super().setup()
            self.peaks["after_setup"] = peak_rss()  # model built, engine and optimizer state made

        def save(self) -> bool:
            self.peaks[f"before_save_step_{self.step}"] = peak_rss()
            t0 = time.perf_counter()
            ok = super().save()
            self.saves[f"step-{self.step}"] = round(time.perf_counter() - t0, 2)
            return ok

        def save_final(self) -> None:
            self.peaks["before_final"] = peak_rss()
            t0 = time.perf_counter()
            super().save_final()
            self.saves["final"] = round(time.perf_counter() - t0, 2)

    return TimedTrainer


def train(work: Path, a, name: str, *extra) -> dict:
    cfg = run_config(work, a, f"training.run_name={name}", *extra)
    trainer = _trainer_class()(cfg)
    t0 = time.perf_counter()
    code = trainer.run()
    rows = [json.loads(x) for x in (trainer.run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = {r["step"]: r for r in rows if "train/loss" in r}
    return {
        "exit": code,
        "wall_s": round(time.perf_counter() - t0, 1),
        "precision": "bf16" if trainer.cfg.training.bf16 else "fp32",
        "loss": {s: r["train/loss"] for s, r in steps.items()},
        "step_time_s": {s: round(r["perf/step_time_s"], 2) for s, r in steps.items()},
        "eval_loss": [r["eval/loss"] for r in rows if "eval/loss" in r],
        "save_s": trainer.saves,
        "peak_rss_at": trainer.peaks,
        "run_dir": str(trainer.run_dir),
    }


def _one_clip(shards: Path):
    import io

    import soundfile as sf

    tar = sorted(shards.glob("*-eval-*.tar"))[0]
    with tarfile.open(tar) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith(".flac"))
        wave, sr = sf.read(io.BytesIO(tf.extractfile(member).read()), dtype="float32")
    assert sr == 16000, sr
    return member.name, wave


def load_final(work: Path, a) -> dict:
    from transformers import AutoModel

    final = work / "runs" / "a" / "final"
    t0 = time.perf_counter()
    model = AutoModel.from_pretrained(str(final), trust_remote_code=True)
    load_s = time.perf_counter() - t0
    name, wave = _one_clip(work / "shards")
    t0 = time.perf_counter()
    text = model.transcribe([wave])[0]  # the exported model's own entry point
    transcribe_s = time.perf_counter() - t0
    # random weights: the text is whatever the greedy ids decode to (ids past the tiny tokenizer's
    # vocabulary decode to nothing); the count of generated tokens shows generation ran
    details = model.model.transcribe([wave], details=True)[0]
    return {
        "class": type(model).__name__,
        "dtype": str(next(model.model.decoder.parameters()).dtype),
        "load_s": round(load_s, 1),
        "clip": name,
        "clip_seconds": round(len(wave) / 16000, 2),
        "transcribe_s": round(transcribe_s, 1),
        "text": text[:200],
        "generated_tokens": details["tokens"],
        "stopped_by": "loop rule" if details["loop"] else "token budget" if details["capped"] else "end of turn",
    }


# --------------------------------------------------------------------------- sizes and checks


def checkpoint_bytes(step_dir: Path) -> dict:
    ds = [p for p in (step_dir / "ds").rglob("*") if p.is_file()]
    optim = sum(p.stat().st_size for p in ds if "optim_states" in p.name)
    module = sum(p.stat().st_size for p in ds if "model_states" in p.name)
    return {
        "total": du(step_dir),
        "model": du(step_dir / "model"),
        "ds_module": module,
        "ds_optimizer": optim,
        "ds_other": du(step_dir / "ds") - module - optim,
        "trainer_state": du(step_dir / "trainer_state.json"),
    }


def same_weights(a_dir: Path, b_dir: Path) -> dict:
    """The trained weights of two model folders: bit-equal, or the largest difference."""
    from safetensors.torch import load_file

    out = {}
    for rel in ("model.safetensors", "adapter/adapter_model.safetensors"):
        x, y = load_file(str(a_dir / rel)), load_file(str(b_dir / rel))
        diff = max(((x[k].float() - y[k].float()).abs().max().item() for k in x), default=0.0)
        out[rel] = {"tensors": len(x), "same_keys": x.keys() == y.keys(), "max_abs_diff": diff}
    return out


# --------------------------------------------------------------------------- driver


def phase(work: Path, a, name: str) -> dict:
    """One phase in a child process (its own peak RSS); its result is the last line of its stdout."""
    cmd = [sys.executable, __file__, "--phase", name, "--work", str(work), "--batch", str(a.batch)]
    cmd += ["--fp32"] if a.fp32 else []
    cmd += ["--small"] if a.small else []
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines or not lines[-1].startswith("{"):
        sys.stdout.write(proc.stdout)
        raise SystemExit(f"phase {name} failed (exit {proc.returncode}); its output is above")
    res = json.loads(lines[-1])
    res["phase_wall_s"] = round(time.perf_counter() - t0, 1)
    print(f"== {name}: {json.dumps(res)}", flush=True)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=2, help="micro batch (clips per step)")
    ap.add_argument("--fp32", action="store_true", help="fp32 (training.bf16=false, model.model_dtype=float32)")
    ap.add_argument("--small", action="store_true", help="gpu_step.py's reduced sizes: a quick check")
    ap.add_argument("--work", default=None, help="working folder (default: a new temp folder; kept)")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--phase", choices=("prepare", "train", "resume", "load"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    work = Path(a.work or tempfile.mkdtemp(prefix="real_size-"))
    if a.phase:
        fn = {
            "prepare": lambda: prepare(work, a),
            "train": lambda: train(work, a, "a"),
            "resume": lambda: train(
                work,
                a,
                "b",
                f"training.resume_from_checkpoint={work / 'runs' / 'a' / 'checkpoints' / 'step-1'}",
                "training.final_model=false",
            ),
            "load": lambda: load_final(work, a),
        }[a.phase]
        res = fn()
        res["peak_rss_bytes"] = peak_rss()
        print(json.dumps(res), flush=True)
        return 0

    work.mkdir(parents=True, exist_ok=True)
    print(f"working folder {work}", flush=True)
    res = {name: phase(work, a, name) for name in ("prepare", "train", "resume", "load")}
    runs = work / "runs"
    res["bytes"] = {
        "a/step-1": checkpoint_bytes(runs / "a" / "checkpoints" / "step-1"),
        "a/step-2": checkpoint_bytes(runs / "a" / "checkpoints" / "step-2"),
        "b/step-2": checkpoint_bytes(runs / "b" / "checkpoints" / "step-2"),
        "a/final": du(runs / "a" / "final"),
        "a/final/encoder": du(runs / "a" / "final" / "encoder"),
        "a/final/decoder": du(runs / "a" / "final" / "decoder"),
    }
    res["resume"]["step2_loss_straight"] = res["train"]["loss"]["2"]
    res["resume"]["step2_loss_resumed"] = res["resume"]["loss"]["2"]
    res["resume"]["step2_weights"] = same_weights(
        runs / "a" / "checkpoints" / "step-2" / "model", runs / "b" / "checkpoints" / "step-2" / "model"
    )
    res["resume"]["exact"] = res["resume"]["step2_loss_straight"] == res["resume"]["step2_loss_resumed"] and all(
        w["same_keys"] and w["max_abs_diff"] == 0.0 for w in res["resume"]["step2_weights"].values()
    )
    print(json.dumps(res, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1) + "\n")
    if not res["resume"]["exact"]:
        print("resume NOT exact: the resumed step 2 differs from the straight run's", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
