"""Evaluate an exported checkpoint: corpus WER per dataset, worst examples, a JSONL of hypotheses.
A set whose clips state their language and task is also scored per language and task (WER, CER for
zh/ja/th/lo/my/yue, BLEU and chrF for translations, language ID, pinned answers in another language:
speechlm.inference.by_language, speechlm.scoring.languages).

    speechlm eval -m MODEL_DIR -d DATASET [-d DATASET ...] [-n N] [--batch-size B] [--json]
    speechlm eval -m MODEL_DIR -d DATASET --noise-snr-db 10 [--noise-dir DIR] [--reverb]
    (`python -m speechlm.eval` takes the same arguments)

MODEL_DIR is an exported model (`checkpoints/step-N/model`), a checkpoint `step-N`, a run folder
(its latest checkpoint), or a Hub id.
Clips are cut as `speechlm transcribe` cuts them (`--long-form`, `--window-seconds`, `--threshold-db`,
`--min-pause-seconds`, `--merge-seconds`; `speechlm.inference`).
DATASET is a built shard set (a folder with manifest.json, or its URL: s3://, https://, ... read as
training reads it), a data recipe (`shards/NAME.yaml` or NAME; its `test` split is reserved for
this), or a JSONL/TSV manifest of audio paths and texts.

A noisy or reverberant test condition is an eval option, never a training setting: `--noise-snr-db X`
mixes noise into every clip at exactly X dB SNR (generated coloured noise, or clips from
`--noise-dir`), `--reverb` convolves every clip with a synthetic room (RT60 0.3-0.7 s, DRR 0-5 dB),
both through speechlm.data.augment with draws fixed by the clip id, so every model hears the same
corrupted clips (`speechlm.inference.evaluation`). The result is named `DATASET+noise10dB`, `DATASET+reverb`, ...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from speechlm import inference
from speechlm.config import ConfigError, cli_errors, command_parser

EXAMPLES = """examples:
  speechlm eval -m outputs/RUN -d loquacious_small -n 200            # a run dir means its latest checkpoint
  speechlm eval -m outputs/RUN/checkpoints/step-2000 -d shards/demo --split test --json
  speechlm eval -m outputs/RUN -d s3://bucket/loquacious_small        # a shard set at a URL
  speechlm eval -m outputs/RUN -d synthetic --noise-snr-db 10 --reverb
  speechlm eval -m outputs/RUN/final -d timed                         # boundary error of word times (kind timed)
  speechlm eval -m outputs/RUN/final -d shards/demo --word-threshold 0.3 --drop-unsupported
  speechlm eval -m copied/step-2000 -d shards/demo --base decoder=/models/my-decoder   # a local base elsewhere"""


def print_table(results: list[dict]) -> None:
    print(f"{'dataset':<24}{'clips':>7}{'WER %':>8}{'orth %':>8}{'sub':>6}{'del':>6}{'ins':>6}{'RTFx':>8}")
    for r in results:
        print(
            f"{r['dataset']:<24}{r['clips']:>7}{100 * r['wer']:>8.2f}{100 * r['orthographic_wer']:>8.2f}"
            f"{r['substitutions']:>6}{r['deletions']:>6}{r['insertions']:>6}{r['rtfx']:>8.1f}"
        )
    print_languages(results)
    for r in results:
        if "boundaries" in r:
            print(f"word times in {r['dataset']}: {json.dumps(r['boundaries'])}")
        if "unsupported_words" in r:
            print(f"unsupported words in {r['dataset']}: {json.dumps(r['unsupported_words'])}")
    for r in results:
        print(f"\nworst in {r['dataset']}:")
        for w in r["worst"]:
            print(f"  [{w['errors']}] {w['id']}\n      ref: {w['reference']}\n      hyp: {w['hypothesis']}")


def print_languages(results: list[dict]) -> None:
    """The scores per language and task of the sets whose clips state them (speechlm.scoring.languages):
    WER/CER %, BLEU and chrF (0-100), language ID %, pinned answers in another language."""
    for r in results:
        scores = r.get("languages")
        if not scores:
            continue
        print(f"\nper language and task in {r['dataset']}:")
        print(f"  {'score':<28}{'value':>9}{'clips':>7}")
        for key, value in scores.items():
            if key.startswith("clips/"):
                continue
            metric, _, name = key.partition("/")
            task = {"wer": "transcribe", "cer": "transcribe", "bleu": "translate", "chrf": "translate"}.get(metric)
            clips = scores.get(f"clips/{task}/{name}", "") if task and "/" not in name else ""
            shown = (
                f"{value:g}"
                if metric == "other_language"
                else f"{(1 if metric in ('bleu', 'chrf') else 100) * value:.2f}"
            )
            print(f"  {key:<28}{shown:>9}{clips:>7}")


def _parser(prog: str) -> argparse.ArgumentParser:
    ap = command_parser(prog, __doc__.split("\n")[0], EXAMPLES)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-d", "--dataset", action="append", required=True)
    ap.add_argument("-n", type=int, default=None, help="clips per dataset (default: all)")
    ap.add_argument("--split", default=None, help="shard split (default: test, else eval)")
    ap.add_argument("--batch-size", type=int, default=32)  # bench/rtfx.py: 32 beat 8
    ap.add_argument(
        "--max-seconds", type=float, default=inference.MAX_SECONDS, help="longer clips are skipped (0: no limit)"
    )
    inference.add_long_form_args(ap)
    ap.add_argument("--out", default=None, help="folder for hypotheses JSONL (default: beside the model)")
    ap.add_argument("--json", action="store_true", help="print results as JSON")
    ap.add_argument("--noise-snr-db", type=float, default=None, help="mix noise into every clip at this SNR")
    ap.add_argument("--noise-dir", default=None, help="noise clips for --noise-snr-db (default: generated noise)")
    ap.add_argument("--reverb", action="store_true", help="convolve every clip with a synthetic room")
    ap.add_argument(
        "--word-threshold",
        type=float,
        default=None,
        help="count generated words whose CTC-head confidence is below this (the hallucination signal)",
    )
    ap.add_argument("--drop-unsupported", action="store_true", help="leave those words out of the hypotheses")
    inference.add_base_args(ap)
    return ap


def _check(args) -> tuple:
    """(name suffix, corruption, LongForm, bases) of the arguments, every one checked before anything loads."""
    if args.noise_dir and args.noise_snr_db is None:
        raise ConfigError("--noise-dir: needs --noise-snr-db")
    suffix, corrupt = inference.condition(args.noise_snr_db, args.noise_dir, args.reverb)
    if args.n is not None and args.n <= 0:
        raise ConfigError(f"-n must be positive, got {args.n}")
    if args.word_threshold is not None and not 0 <= args.word_threshold <= 1:
        raise ConfigError(f"--word-threshold: must be in [0, 1], got {args.word_threshold}")
    if args.drop_unsupported and args.word_threshold is None:
        raise ConfigError("--drop-unsupported: needs --word-threshold")
    inference.check_max_seconds(args.max_seconds)
    long_form = inference.long_form_from_args(args)
    bases = inference.bases_from_args(args)
    inference.local_model(args.model)  # validate first, in argument order: a wrong path fails before anything loads
    for d in args.dataset:
        inference.dataset_clips(d, args.split, args.n)
    return suffix, corrupt, long_form, bases


@cli_errors
def main(argv=None, prog: str = "python -m speechlm.eval"):
    args = _parser(prog).parse_args(argv)
    suffix, corrupt, long_form, bases = _check(args)
    torch.manual_seed(0)
    model = inference.load_model(args.model, bases)
    results = [
        inference.evaluate(
            model,
            d,
            args.n,
            args.batch_size,
            args.split,
            args.max_seconds,
            long_form,
            corrupt=corrupt,
            suffix=suffix,
            word_threshold=args.word_threshold,
            drop_unsupported=args.drop_unsupported,
        )
        for d in args.dataset
    ]
    out = Path(args.out) if args.out else (Path(args.model) / "eval" if Path(args.model).is_dir() else Path("eval"))
    out.mkdir(parents=True, exist_ok=True)
    for r in results:
        with open(out / f"{r['dataset']}.jsonl", "w") as f:
            for row in r.pop("rows"):
                f.write(json.dumps(row) + "\n")
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_table(results)
        print(f"\nhypotheses: {out}/")
    return results


if __name__ == "__main__":
    main()
