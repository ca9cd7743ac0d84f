"""Checkpoint save time and size on the demo's recipe (issue 29: before and after light checkpoints).

Runs the real `speechlm.train.loop.Trainer` in-process with `--config demo` (Whisper tiny.en + SmolLM2-135M,
offline weights) for 3 steps, saving at every step, on a small synthetic shard set (the test suite's
`synthetic_shards` recipe, built here when missing). `Trainer.save` (and `Trainer.save_final` where the tree
has it) are wrapped with a timer; nothing else changes. The code measured is whatever `speechlm` imports,
so the same script measures any tree:

    cd TREE && OMP_NUM_THREADS=1 PYTHONPATH=$PWD nice python /path/to/bench/checkpoint_save.py \\
        --out /tmp/save-X --json /tmp/save-X.json
    python bench/checkpoint_save.py --compare /tmp/save-before.json /tmp/save-after.json [more pairs...]

Per checkpoint `step-N`: bytes of `model/`, of DeepSpeed's module state file (`ds/*/mp_rank_*_model_states.pt`),
of its optimizer state files (`ds/*/*optim_states.pt`) and of the rest (trainer state, `latest`, the
zero_to_fp32.py DeepSpeed copies); `final/` when the run wrote one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

OVERRIDES = [
    "training.max_steps=3",
    "training.save_steps=1",
    "training.eval_steps=0",
    "training.ctc_warmup_steps=0",
    "training.warmup_steps=1",
    "training.logging_steps=1",
    "training.report_to=none",
    "training.push_to_hub=false",
    "data.num_workers=1",
    "data.eval=[]",  # eval off: the end of a run evaluates whatever eval set is configured
]
PARTS = ("model", "ds_module", "ds_optimizer", "rest")


def build_shards(out: Path) -> None:
    """The test suite's small synthetic set (tests/synthetic_set.py: small_synthetic_recipe)."""
    from speechlm.shard import build, load_recipe

    recipe, _ = load_recipe("synthetic")
    recipe.name = "synthetic"
    for split, n in {"train": 64, "eval": 16, "test": 8}.items():
        setattr(recipe.sources[0].settings, split, n)
    recipe.sources[0].settings.unseen_test = 4
    recipe.output.shard_clips = 8
    recipe.output.work_chunk = 16
    build(recipe, out, workers=1)


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def checkpoint_bytes(step_dir: Path) -> dict:
    module = sum(f.stat().st_size for f in step_dir.glob("ds/*/mp_rank_*_model_states.pt"))
    optimizer = sum(f.stat().st_size for f in step_dir.glob("ds/*/*optim_states.pt"))
    model = tree_bytes(step_dir / "model")
    total = tree_bytes(step_dir)
    return {
        "model": model,
        "ds_module": module,
        "ds_optimizer": optimizer,
        "rest": total - model - module - optimizer,
        "total": total,
    }


def timed(cls, name: str, times: list[float]) -> None:
    """Wrap cls.name with a wall-clock timer (measurement only: the call itself is unchanged)."""
    inner = getattr(cls, name)

    def wrapper(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return inner(self, *args, **kwargs)
        finally:
            times.append(time.perf_counter() - t0)

    setattr(cls, name, wrapper)


def git_head(path: Path) -> str:
    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        return out.stdout.strip() or "?"
    except OSError:
        return "?"


def run(args) -> dict:
    import speechlm
    from speechlm import config as config_mod
    from speechlm.train.loop import Trainer

    if not (args.shards / "manifest.json").is_file():
        build_shards(args.shards)
    saves: list[float] = []
    finals: list[float] = []
    timed(Trainer, "save", saves)
    if hasattr(Trainer, "save_final"):
        timed(Trainer, "save_final", finals)
    overrides = OVERRIDES + [
        f"training.per_device_train_batch_size={args.micro}",
        f"training.output_dir={args.out}",
        "training.run_name=bench",
        f"data.train=[{{path: '{args.shards}', split: train}}]",
    ]
    cfg = config_mod.load(config_mod.Config, "demo", None, overrides)
    t0 = time.perf_counter()
    trainer = Trainer(cfg)
    code = trainer.run()
    wall = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(f"the trainer exited {code}")
    ckpts = sorted((trainer.run_dir / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
    final = trainer.run_dir / "final"
    tree = Path(speechlm.__file__).resolve().parent.parent
    return {
        "tree": str(tree),
        "commit": git_head(tree),
        "save_s": saves,
        "save_final_s": finals,
        "run_s": wall,
        "checkpoints": {p.name: checkpoint_bytes(p) for p in ckpts},
        "final_bytes": tree_bytes(final) if final.is_dir() else None,
    }


def mb(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e6:,.1f} MB"


def summary(r: dict) -> dict:
    """Means over the saves and over the checkpoints of one run."""
    sizes = list(r["checkpoints"].values())
    return {
        "save_s": statistics.mean(r["save_s"]),
        "final_s": statistics.mean(r["save_final_s"]) if r["save_final_s"] else None,
        **{k: statistics.mean(s[k] for s in sizes) for k in (*PARTS, "total")},
        "final_bytes": r["final_bytes"],
    }


def compare(paths: list[Path]) -> str:
    """Pairs (before, after), in the order they ran: a table of each run and the after/before ratios."""
    runs = [json.loads(p.read_text()) for p in paths]
    if len(runs) % 2:
        raise SystemExit("--compare: give pairs, before then after")
    rows = [
        "| run | commit | saves | s per save | final/ write | model/ | ds/ module | ds/ optimizer | rest | checkpoint "
        "| final/ |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ratios = []
    for i, r in enumerate(runs):
        s = summary(r)
        label = f"{'before' if i % 2 == 0 else 'after'} {i // 2 + 1}"
        final_s = "-" if s["final_s"] is None else f"{s['final_s']:.2f} s"
        rows.append(
            f"| {label} | {r['commit']} | {len(r['save_s'])} | {s['save_s']:.2f} s | {final_s} | "
            + " | ".join(mb(s[k]) for k in (*PARTS, "total"))
            + f" | {mb(s['final_bytes'])} |"
        )
        if i % 2:
            b = summary(runs[i - 1])
            ratios.append((s["save_s"] / b["save_s"], s["total"] / b["total"]))
    lines = [*rows, ""]
    for n, (t, size) in enumerate(ratios, 1):
        lines.append(f"pair {n}: after/before save time x{t:.3f}, checkpoint bytes x{size:.4f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, help="a fresh output dir for the run")
    p.add_argument("--shards", type=Path, default=Path("/tmp/savebench-shards"), help="built here when missing")
    p.add_argument("--micro", type=int, default=4, help="training.per_device_train_batch_size")
    p.add_argument("--json", type=Path, help="write the run's figures here")
    p.add_argument("--compare", type=Path, nargs="+", help="JSON files of runs, before/after pairs: print a table")
    args = p.parse_args(argv)
    if args.compare:
        print(compare(args.compare))
        return 0
    if args.out is None:
        p.error("--out is required to run")
    if args.out.exists() and any(args.out.iterdir()):
        p.error(f"--out {args.out}: not empty (each run gets a fresh dir)")
    result = run(args)
    text = json.dumps(result, indent=1)
    if args.json:
        args.json.write_text(text)
    print(text, file=sys.stderr)
    s = summary(result)
    print(
        f"{result['commit']}: {len(result['save_s'])} saves, {s['save_s']:.2f} s per save, "
        f"checkpoint {mb(s['total'])} (model/ {mb(s['model'])}, ds module {mb(s['ds_module'])}, "
        f"ds optimizer {mb(s['ds_optimizer'])}, rest {mb(s['rest'])}); final/ {mb(s['final_bytes'])}"
        + (f" in {s['final_s']:.2f} s" if s["final_s"] is not None else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
