"""The embedded default, end to end with nothing downloaded (what `make demo` runs):

1. synthesize the built-in corpus with espeak-ng and write it as WebDataset shards (shards/synthetic);
2. pretrain the tiny encoder with word-level CTC on it (the stand-in for the real encoder's
   pretraining, which cannot be downloaded here; see speechlm/pretrain_encoder.py);
3. train the speech-LLM on CPU with DeepSpeed (`launch/train.py --config demo`): frozen encoder,
   fresh projector, tiny decoder;
4. transcribe the held-out test clips, score WER, and write plots of the run.

    python -m speechlm.demo [--out outputs] [--name demo] [key=value overrides for the trainer]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from speechlm import pretrain_encoder, report, shard
from speechlm.config import REPO_ROOT, ConfigError, cli_errors


def _summary(shards: Path) -> str:
    m = json.loads((shards / "manifest.json").read_text())
    parts = [f"{k} {v['clips']} clips / {60 * v['hours']:.1f} min" for k, v in sorted(m["splits"].items())]
    return f"{shards}: " + ", ".join(parts)


def _losses(run_dir: Path) -> tuple[list[float], list[float]]:
    train, ev = [], []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "train/loss" in row:
            train.append(row["train/loss"])
        if "eval/loss" in row:
            ev.append(row["eval/loss"])
    return train, ev


@cli_errors
def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m speechlm.demo", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="outputs", help="training.output_dir")
    ap.add_argument("--name", default="demo", help="training.run_name")
    ap.add_argument("--eval-split", default="test")
    ap.add_argument("--ctc-steps", type=int, default=3000, help="encoder CTC pretraining steps")
    ap.add_argument("--shards", default="synthetic", help="data recipe of the corpus (default: the built-in one)")
    ap.add_argument("overrides", nargs="*", help="key=value overrides for the tiny recipe")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()

    print("== 1/5 shards: synthesizing the built-in corpus with espeak-ng", flush=True)
    try:
        shards = shard.build(args.shards)
    except ConfigError as e:  # built by an older recipe: the corpus is derived data, so rebuild it
        if args.shards != "synthetic" or "another recipe" not in str(e):
            raise
        print(f"{e}; rebuilding it", flush=True)
        shards = shard.build(args.shards, overwrite=True)
    print(_summary(shards), flush=True)

    run_dir = Path(args.out) / args.name
    print("== 2/5 pretraining the tiny encoder (word-level CTC)", flush=True)
    encoder = run_dir / "ctc_encoder"
    ctc = pretrain_encoder.pretrain(shards, encoder, steps=args.ctc_steps)
    print(f"encoder: {encoder} (held-out word WER {100 * ctc['eval_word_wer']:.1f}% by CTC alone)", flush=True)

    print("== 3/5 training the speech-LLM (DeepSpeed, CPU)", flush=True)
    cmd = [sys.executable, str(REPO_ROOT / "launch" / "train.py"), "--config", "demo",
           f"training.output_dir={args.out}", f"training.run_name={args.name}",
           f"model.audio_model_id={encoder.resolve()}",
           f"data.train=[{{path: {shards}, split: train}}]", f"data.eval=[{{path: {shards}, split: eval}}]",
           *args.overrides]
    env = dict(os.environ, HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"))
    rc = subprocess.run(cmd, env=env).returncode
    if rc != 0:
        raise ConfigError(f"training exited with status {rc}; see {run_dir}")

    print(f"== 4/5 transcribing the held-out '{args.eval_split}' clips", flush=True)
    from speechlm.eval import evaluate, load_model

    model = load_model(str(run_dir))
    result = evaluate(model, str(shards), split=args.eval_split, batch_size=16)

    print("== 5/5 plots", flush=True)
    plots = report.write_plots(run_dir)
    train, ev = _losses(run_dir)
    for row in result["worst"][:3]:
        print(f"  ref: {row['reference']}\n  hyp: {row['hypothesis']}")
    print(f"\ntrain loss {train[0]:.3f} -> {train[-1]:.3f}; eval loss {ev[-1]:.3f}" if train and ev else "")
    print(f"held-out WER {100 * result['wer']:.1f}% (orthographic {100 * result['orthographic_wer']:.1f}%) "
          f"on {result['clips']} clips; {time.perf_counter() - t0:.0f} s in all")
    print(f"model: {run_dir}/checkpoints (latest)  plots: {plots[0]}")
    return {"wer": result["wer"], "result": result, "train_loss": train, "eval_loss": ev, "run_dir": str(run_dir),
            "shards": str(shards), "plots": [str(p) for p in plots]}


if __name__ == "__main__":
    main()
