"""Step time of the speechlm trainer vs a bare PyTorch loop (the floor) vs transformers' Trainer.

All three train the tiny twin on the synthetic shards with the same TrainLoader, the same AdamW
parameter groups, the same warmup+cosine schedule and clipping, world size 1 on CPU. Each runs in
its own process; the figure is the median wall time per optimizer step (data fetch included) after
`--warmup` steps. Usage: python bench/train.py [--steps 40] [--warmup 5] [--override KEY=VALUE ...]
(`--override` adds config overrides to every run, e.g. another shard set for data.train.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OVERRIDES = [
    "training.per_device_train_batch_size=8",
    "training.eval_steps=0",
    "training.save_steps=0",
    "training.logging_steps=1",
    "data.num_workers=1",
    "data.eval=[]",
    "training.report_to=none",
]
EXTRA: list[str] = []  # --override


def load_cfg(steps: int, out: str):
    from speechlm import config as config_mod

    return config_mod.load(
        config_mod.Config,
        "tiny",
        None,
        OVERRIDES + EXTRA + [f"training.max_steps={steps}", f"training.output_dir={out}", "training.run_name=bench"],
    )


def bench_speechlm(steps: int, out: str) -> list[float]:
    from speechlm.train.loop import Trainer

    trainer = Trainer(load_cfg(steps, out))
    assert trainer.run() == 0
    rows = [json.loads(x) for x in (trainer.run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["perf/step_time_s"] for r in rows if "perf/step_time_s" in r]


def _setup(steps: int, out: str):
    from transformers import set_seed

    from speechlm.model import build_model
    from speechlm.train import optim
    from speechlm.train.inputs import make_loaders

    cfg = load_cfg(steps, out)
    set_seed(cfg.training.seed)
    model = build_model(cfg)
    loader, _ = make_loaders(cfg, model, 0, 1)
    opt = optim.build_optimizer(model, cfg.training)
    sched = optim.build_scheduler(opt, cfg.training, steps)
    return cfg, model, loader, opt, sched


def bench_bare(steps: int, out: str) -> list[float]:
    import torch

    cfg, model, loader, opt, sched = _setup(steps, out)
    model.train()
    times, it = [], iter(loader)
    for _ in range(steps):
        t0 = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            it = iter(loader)
            batch = next(it)
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.training.max_grad_norm)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        float(loss)
        times.append(time.perf_counter() - t0)
    return times


def bench_hf(steps: int, out: str) -> list[float]:
    from transformers import Trainer, TrainerCallback, TrainingArguments

    cfg, model, loader, opt, sched = _setup(steps, out)
    t = cfg.training

    class Loader:  # the same TrainLoader, restarted per epoch like a DataLoader
        def __len__(self):
            return loader.steps_per_epoch

        def __iter__(self):
            return iter(loader)

    class SpeechTrainer(Trainer):
        def get_train_dataloader(self):
            return Loader()

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            return model(**inputs).loss

    ends: list[float] = [time.perf_counter()]

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            ends.append(time.perf_counter())

    args = TrainingArguments(
        output_dir=out,
        max_steps=steps,
        per_device_train_batch_size=t.per_device_train_batch_size,
        max_grad_norm=t.max_grad_norm,
        report_to=[],
        save_strategy="no",
        logging_steps=10**9,
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=t.seed,
    )
    SpeechTrainer(model=model, args=args, optimizers=(opt, sched), callbacks=[Clock()]).train()
    return [b - a for a, b in zip(ends, ends[1:])]


def child(kind: str, steps: int, out: str) -> None:
    fn = {"speechlm": bench_speechlm, "bare": bench_bare, "hf": bench_hf}[kind]
    times = fn(steps, out)
    print("BENCH " + json.dumps({"kind": kind, "times": times}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=2, help="rounds; each kind's best median counts (CPU noise)")
    ap.add_argument("--child", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--override", nargs="*", default=[], help="config key=value added to every run")
    a = ap.parse_args()
    EXTRA.extend(a.override)
    if a.child:
        return child(a.child, a.steps, a.out)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "HF_HUB_OFFLINE": "1"}
    result: dict[str, float] = {}
    kinds = ["bare", "speechlm", "hf"]
    for r in range(a.repeat):
        for kind in kinds[r % 3 :] + kinds[: r % 3]:  # rotate the order so drift hits each kind alike
            with tempfile.TemporaryDirectory() as out:
                p = subprocess.run(
                    [sys.executable, __file__, "--child", kind, "--steps", str(a.steps), "--out", out, "--override"]
                    + a.override,
                    env=env,
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                )
                line = [x for x in p.stdout.splitlines() if x.startswith("BENCH ")]
                if p.returncode or not line:
                    sys.exit(f"{kind} failed:\n{p.stderr[-3000:]}")
                times = json.loads(line[0][6:])["times"][a.warmup :]
                result[kind] = min(result.get(kind, float("inf")), statistics.median(times))
    floor = result["bare"]
    print(
        f"tiny twin, batch 8, world 1, CPU, OMP_NUM_THREADS={env['OMP_NUM_THREADS']}; median step time over "
        f"{a.steps - a.warmup} steps, best of {a.repeat} rounds"
    )
    for kind, label in (
        ("bare", "bare PyTorch loop (floor)"),
        ("speechlm", "speechlm trainer (DeepSpeed ZeRO-2)"),
        ("hf", "transformers Trainer"),
    ):
        print(f"  {label:38s} {result[kind] * 1000:8.1f} ms   {result[kind] / floor:5.2f}x")


if __name__ == "__main__":
    main()
