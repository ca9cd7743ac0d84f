"""Evaluate an exported checkpoint: corpus WER per dataset, worst examples, a JSONL of hypotheses.

    speechlm eval -m MODEL_DIR -d DATASET [-d DATASET ...] [-n N] [--batch-size B] [--json]
    speechlm eval -m MODEL_DIR -d DATASET --noise-snr-db 10 [--noise-dir DIR] [--reverb]
    (`python -m speechlm.eval` takes the same arguments)

MODEL_DIR is an exported model (`checkpoints/step-N/model`), a checkpoint `step-N`, a run folder
(its latest checkpoint), or a Hub id.
Clips are cut as `speechlm.transcribe` cuts them (`--long-form`, `--window-seconds`, `--threshold-db`,
`--min-pause-seconds`, `--merge-seconds`; `speechlm.longform`).
DATASET is a built shard set (a folder with manifest.json, or its URL: s3://, https://, ... read as
training reads it), a data recipe (`shards/NAME.yaml` or NAME; its `test` split is reserved for
this), or a JSONL/TSV manifest of audio paths and texts.

A noisy or reverberant test condition is an eval option, never a training setting: `--noise-snr-db X`
mixes noise into every clip at exactly X dB SNR (generated coloured noise, or clips from
`--noise-dir`), `--reverb` convolves every clip with a synthetic room (RT60 0.3-0.7 s, DRR 0-5 dB),
both through speechlm.data.augment with draws fixed by the clip id, so every model hears the same
corrupted clips. The result is named `DATASET+noise10dB`, `DATASET+reverb`, ...
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

from speechlm import audio, longform, shard, wer
from speechlm.config import REPO_ROOT, ConfigError, DataSet, cli_errors
from speechlm.config.augment import AugmentConfig, NoiseAugment, ReverbAugment, SpeedAugment
from speechlm.data import Clips, EvalLoader, remote
from speechlm.data.augment import Augmenter, list_audio
from speechlm.data.catalog import read_manifest
from speechlm.data.remote import RemoteIO
from speechlm.inference import (
    MAX_SECONDS,
    add_long_form_args,
    check_long_form_args,
    load_clip,
    long_form_settings,
    transcribe_timed,
    transcribe_waves,
)
from speechlm.model import from_pretrained
from speechlm.model.io import is_model_folder
from speechlm.shard import Source, sources

EXAMPLES = """examples:
  speechlm eval -m outputs/RUN -d loquacious_small -n 200            # a run dir means its latest checkpoint
  speechlm eval -m outputs/RUN/checkpoints/step-2000 -d shards/demo --split test --json
  speechlm eval -m outputs/RUN -d s3://bucket/loquacious_small        # a shard set at a URL
  speechlm eval -m outputs/RUN -d synthetic --noise-snr-db 10 --reverb
  speechlm eval -m outputs/RUN/final -d timed                         # boundary error of word times (kind timed)
  speechlm eval -m outputs/RUN/final -d shards/demo --word-threshold 0.3 --drop-unsupported"""


class ShardClips:
    """The clips of one split of a shard set (a folder or a URL), read by the training reader
    (speechlm.data: the same manifest catalog, streaming and retries) in manifest order, at most `n`.
    Iterates (id, wave, text); clips the reader could not use are counted in `skipped`."""

    def __init__(self, path: str, split: str | None, n: int | None, batch_size: int = 8):
        io_ = RemoteIO()
        if split is None:
            split = "test" if "test" in read_manifest(path, "dataset", io_).get("splits", {}) else "eval"
        self.loader = EvalLoader(
            [DataSet(path=path, split=split)],
            Clips(),
            batch_size=batch_size,
            max_samples_per_set=n or 0,
            remote_io=io_,
            what="dataset",
        )

    def __iter__(self) -> Iterator[tuple[str, object, str]]:
        self.words: dict[str, list] = {}  # clip id -> true word times, for sets that carry them (kind timed)
        for batch in self.loader:
            for c in batch["clips"]:
                if c.get("words"):
                    self.words[c["id"]] = c["words"]
                yield c["id"], c["audio"], c["text"]

    @property
    def skipped(self) -> int:
        return sum(self.loader.stats[k] for k in ("missing_clips", "bad_clips"))


def _manifest_clips(path: Path) -> Iterator[tuple[str, object, str]]:
    """A JSONL/TSV list of audio paths and texts, read as the shard build reads one (kind: manifest)."""
    src = Source(name="eval", kind="manifest", id_column="id", splits={"test": [str(path.resolve())]})
    for unit in sources.of(src).list_units(src, "test", "dataset"):
        for oid, text, apath, _ in unit["rows"]:
            if not text:
                raise ConfigError(f"{path}: clip {oid} has no 'text' (a reference is needed to score it)")
            yield oid, apath, text


def dataset_clips(
    spec: str, split: str | None = None, n: int | None = None, batch_size: int = 8
) -> tuple[str, Iterable]:
    """(name, iterable of (id, wave or audio path, reference text)) for any dataset spec: a shard set
    (folder or URL), a JSONL/TSV manifest, or a data recipe (built first if needed; its test split)."""
    if remote.is_url(spec):
        return spec.rstrip("/").rsplit("/", 1)[-1], ShardClips(spec, split, n, batch_size)
    p = Path(spec)
    if p.is_dir():
        if not (p / "manifest.json").is_file():
            raise ConfigError(f"{spec}: a dataset folder must hold a manifest.json (built by speechlm.shard)")
        return p.name, ShardClips(str(p), split, n, batch_size)
    if p.suffix in (".jsonl", ".tsv") and p.is_file():
        return p.stem, _manifest_clips(p)
    # a data recipe: build its shards if they are not there yet (the test split is reserved for eval)
    if not (p.suffix in (".yaml", ".yml") and p.is_file()) and not (REPO_ROOT / "shards" / f"{spec}.yaml").is_file():
        raise ConfigError(f"dataset '{spec}' is not a shard folder or URL, a manifest or a data recipe")
    out = shard.build(spec)  # returns at once when the shards are up to date
    return out.name, ShardClips(str(out), split or "test", n, batch_size)


def _chunks(it, n: int | None, size: int):
    chunk = []
    for k, item in enumerate(it):
        if n is not None and k >= n:
            break
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def condition(noise_snr_db: float | None = None, noise_dir: str | None = None, reverb: bool = False):
    """(name suffix, Augmenter or None) for a corrupted test condition; the same draws for every run."""
    if noise_snr_db is None and not reverb:
        return "", None
    cfg = AugmentConfig(enabled=True, speed=SpeedAugment([1.0], prob=0.0))
    suffix = ""
    if reverb:
        cfg.reverb = ReverbAugment(prob=1.0, rt60_s=[0.3, 0.7], drr_db=[0.0, 5.0])
        suffix += "+reverb"
    if noise_snr_db is not None:
        cfg.noise = NoiseAugment(prob=1.0, snr_db=[noise_snr_db, noise_snr_db], dir=noise_dir)
        suffix += f"+noise{noise_snr_db:g}dB"
    if noise_dir is not None:
        list_audio(noise_dir, "--noise-dir")  # a missing or empty folder: a ConfigError naming the flag
    return suffix, Augmenter(cfg, seed=0)


CHUNK_CLIPS = 512  # clips decoded and sorted by length at a time: bounded memory, little padding


def evaluate(
    model,
    spec: str,
    n: int | None = None,
    batch_size: int = 16,
    split: str | None = None,
    max_seconds: float | None = MAX_SECONDS,
    window: float | None = None,
    strategy: str = longform.DEFAULT_STRATEGY,
    corrupt=None,
    suffix: str = "",
    word_threshold: float | None = None,
    drop_unsupported: bool = False,
    **segment_settings,
) -> dict:
    """Corpus WER of `model` on a dataset. Clips are decoded CHUNK_CLIPS at a time, sorted by length and
    batched (`transcribe_waves`); clips longer than the model's window are cut into windows; a clip
    that can't be decoded or is over `max_seconds` is skipped, logged and counted. `corrupt` (from
    `condition`): an Augmenter applied to every clip (epoch 0, the clip's id). `segment_settings`:
    threshold_db, min_pause_seconds, merge_seconds of the `"segments"` cut (`speechlm.longform`).
    Word timestamps are made (`transcribe_timed`) when the references carry true times (their boundary
    error is reported) or `word_threshold` is set: the share of generated words whose CTC support is
    below it is counted (the hallucination signal), and `drop_unsupported` leaves those words out."""
    name, clips = dataset_clips(spec, split, n, batch_size)
    name += suffix
    rows, skipped, audio_seconds = [], 0, 0.0
    stops = {"capped": 0, "loops_truncated": 0}
    t0 = time.perf_counter()
    for chunk in _chunks(clips, n, CHUNK_CLIPS):
        waves, keep = [], []
        for cid, src, ref in chunk:
            try:
                wave = load_clip(src, cid, max_seconds)
            except ConfigError as e:
                skipped += 1
                print(f"skip {e}", file=sys.stderr)
                continue
            waves.append(wave if corrupt is None else corrupt(wave, 0, str(cid)))
            keep.append((cid, ref))
            audio_seconds += len(wave) / audio.SAMPLE_RATE
        if waves:
            run = (batch_size, window, strategy, stops, word_threshold, drop_unsupported)
            rows += _transcribe_chunk(model, waves, keep, getattr(clips, "words", {}), *run, **segment_settings)
    if not rows:
        raise ConfigError(f"dataset '{spec}' gave no clips to evaluate")
    result = {"dataset": name, **wer.score([r["reference"] for r in rows], [r["hypothesis"] for r in rows])}
    result["skipped"] = skipped + getattr(clips, "skipped", 0)
    # how often generation was stopped by the clip's token budget or by the loop rule, not by end-of-turn
    result.update(stops)
    result.update(timing_summary(rows, word_threshold))
    result["seconds"] = round(time.perf_counter() - t0, 2)
    result["audio_seconds"] = round(audio_seconds, 2)
    result["rtfx"] = round(audio_seconds / max(result["seconds"], 1e-9), 2)  # audio seconds per wall second
    for r in rows:
        r["errors"] = wer.clip_errors(r["reference"], r["hypothesis"])
    result["worst"] = sorted(rows, key=lambda r: -r["errors"])[:5]
    result["rows"] = rows
    return result


def local_model(model_dir: str) -> Path | None:
    """The local folder MODEL_DIR names, None for a Hub id, ConfigError for neither. Cheap: CLIs
    call it before anything slow so that a wrong path fails at once."""
    p = Path(model_dir)
    if p.is_dir():
        return p
    if p.suffix or model_dir.startswith((".", "/")) or model_dir.count("/") != 1:
        raise ConfigError(f"model '{model_dir}' is neither a local folder nor a Hub id")
    return None


def load_model(model_dir: str):
    p = local_model(model_dir)
    if p is None:
        from huggingface_hub import snapshot_download

        p = Path(snapshot_download(model_dir))
    return from_pretrained(resolve_model_dir(p))


def resolve_model_dir(p: Path) -> Path:
    """A model folder (a run's `final/` too), a checkpoint `step-N/` (its `model/`), or a run dir (its
    latest checkpoint)."""
    if is_model_folder(p):
        return p
    if is_model_folder(p / "model"):
        return p / "model"
    latest = p / "checkpoints" / "latest"
    if latest.is_file():
        return resolve_model_dir(p / "checkpoints" / latest.read_text().strip())
    raise ConfigError(f"{p} is not a speechlm model folder (no speechlm config.json, model/ or checkpoints/latest)")


def _transcribe_chunk(model, waves, keep, truth, batch_size, window, strategy, stops, threshold, drop, **cut):
    """The rows of one chunk of decoded clips; with word times when the set has true ones or a threshold is set."""
    if threshold is None and not truth:
        hyps = transcribe_waves(model, waves, batch_size, window, strategy, stops=stops, **cut)
        return [{"id": c, "reference": r, "hypothesis": h} for (c, r), h in zip(keep, hyps)]
    timed = transcribe_timed(model, waves, batch_size, window, strategy, stops=stops, **cut)
    return [timed_row(c, r, t, truth.get(c), threshold, drop) for (c, r), t in zip(keep, timed)]


def timed_row(cid, ref: str, timed: dict, truth, threshold: float | None, drop: bool) -> dict:
    """One clip's row with word times: its words, the share the CTC head does not support, and the
    boundary errors against `truth` (true word times) when the set has them."""
    from speechlm.boundaries import score_boundaries  # word-time scoring: only for timed output

    words = timed["words"]
    row = {"id": cid, "reference": ref, "hypothesis": timed["text"], "words": words}
    if threshold is not None:
        row["unsupported"] = sum(w["confidence"] < threshold for w in words)
        if drop:
            row["hypothesis"] = " ".join(w["text"] for w in words if w["confidence"] >= threshold)
    if truth:
        row["boundaries"] = score_boundaries(truth, words)
    return row


def timing_summary(rows: list[dict], threshold: float | None) -> dict:
    """The hallucination signal's counts and the boundary errors, summed over clips."""
    out = {}
    if threshold is not None:
        words = sum(len(r.get("words", [])) for r in rows)
        flagged = sum(r.get("unsupported", 0) for r in rows)
        out["unsupported_words"] = {"threshold": threshold, "flagged": flagged, "words": words}
    scored = [r.pop("boundaries") for r in rows if "boundaries" in r]
    if scored:
        out["boundaries"] = sum(scored[1:], scored[0]).summary()
    return out


def print_table(results: list[dict]) -> None:
    print(f"{'dataset':<24}{'clips':>7}{'WER %':>8}{'orth %':>8}{'sub':>6}{'del':>6}{'ins':>6}{'RTFx':>8}")
    for r in results:
        print(
            f"{r['dataset']:<24}{r['clips']:>7}{100 * r['wer']:>8.2f}{100 * r['orthographic_wer']:>8.2f}"
            f"{r['substitutions']:>6}{r['deletions']:>6}{r['insertions']:>6}{r['rtfx']:>8.1f}"
        )
    for r in results:
        if "boundaries" in r:
            print(f"word times in {r['dataset']}: {json.dumps(r['boundaries'])}")
        if "unsupported_words" in r:
            print(f"unsupported words in {r['dataset']}: {json.dumps(r['unsupported_words'])}")
    for r in results:
        print(f"\nworst in {r['dataset']}:")
        for w in r["worst"]:
            print(f"  [{w['errors']}] {w['id']}\n      ref: {w['reference']}\n      hyp: {w['hypothesis']}")


def _parser(prog: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=prog,
        description=__doc__.split("\n")[0],
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-d", "--dataset", action="append", required=True)
    ap.add_argument("-n", type=int, default=None, help="clips per dataset (default: all)")
    ap.add_argument("--split", default=None, help="shard split (default: test, else eval)")
    ap.add_argument("--batch-size", type=int, default=32)  # bench/rtfx.py: 32 beat 8
    ap.add_argument("--max-seconds", type=float, default=MAX_SECONDS, help="longer clips are skipped (0: no limit)")
    ap.add_argument("--window-seconds", type=float, default=None, help="long clips are cut into windows of this")
    add_long_form_args(ap)
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
    return ap


@cli_errors
def main(argv=None, prog: str = "python -m speechlm.eval"):
    args = _parser(prog).parse_args(argv)
    if args.noise_dir and args.noise_snr_db is None:
        raise ConfigError("--noise-dir: needs --noise-snr-db")
    suffix, corrupt = condition(args.noise_snr_db, args.noise_dir, args.reverb)
    if args.n is not None and args.n <= 0:
        raise ConfigError(f"-n must be positive, got {args.n}")
    if args.word_threshold is not None and not 0 <= args.word_threshold <= 1:
        raise ConfigError(f"--word-threshold: must be in [0, 1], got {args.word_threshold}")
    if args.drop_unsupported and args.word_threshold is None:
        raise ConfigError("--drop-unsupported: needs --word-threshold")
    check_long_form_args(args)
    local_model(args.model)  # validate first, in argument order: a wrong path fails before anything loads
    for d in args.dataset:
        dataset_clips(d, args.split, args.n)
    torch.manual_seed(0)
    model = load_model(args.model)
    results = [
        evaluate(
            model,
            d,
            args.n,
            args.batch_size,
            args.split,
            args.max_seconds,
            args.window_seconds,
            corrupt=corrupt,
            suffix=suffix,
            word_threshold=args.word_threshold,
            drop_unsupported=args.drop_unsupported,
            **long_form_settings(args),
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
