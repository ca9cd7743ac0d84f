#!/usr/bin/env python
"""Long-form transcription: speech segments cut at every pause vs windows cut at pauses vs fixed
overlapping windows merged at the seams.

    python bench/longform.py [-m MODEL | --whisper offline/whisper-tiny.en] [--minutes 3] [--threads 2]
        [--data shards/synthetic] [--strategies segments pause overlap] [--windows 10 20 30]
        [--merge 0 5 10] [--thresholds 30] [--min-pause 0.3] [--keep-before 0.15] [--keep-after 0.25]
        [--singles-default]
    python bench/longform.py --cuts [--data ...]   # no model: where the "segments" cuts fall (below)
    python bench/longform.py -m MODEL --data shards/demo --parts   # the test split's parts, per strategy

The recording: a corpus's held-out test sentences (--data: a data recipe or shard folder, split test;
never in training; clips with an empty reference, non-speech, left out), concatenated in order with
pauses of 0.3-1.0 s (seeded), ~3 minutes (tests/demo/test_longform_demo.py builds the same one from the
demo's shards/demo). The baseline is
the same sentences transcribed one by one; each long-form setting transcribes the whole recording
(speechlm.model.longform.batching.transcribe_long, windows batched). Reported per setting: WER of the recording
against the joined references, its ratio to the per-sentence WER, and its deletions and
insertions beside the per-sentence ones (words dropped or repeated at seams show up there).
The recognizer is a speechlm model (-m) or Whisper tiny.en's own generate (an ASR that needs no
training here; windows of at most 30 s). `"segments"` runs once per --merge x --thresholds x
--keep-before x --keep-after setting (seconds of silence kept before and after speech), at the default
window (20 s, at most the recognizer's limit; --segments-window);
`--singles-default` adds the one-by-one sentences transcribed through the default strategy (what
`speechlm eval` and `speechlm transcribe` now do to short clips).

`--cuts` needs no model: the test sentences joined with the shortest pause (0.3 s), at full level,
at 1/100 of it, with white noise floors, and with every other sentence quieter (a second, quieter
speaker), and for each `--thresholds` value how many pauses between sentences get no cut (missed),
how many cuts fall inside a sentence's speech, and how much speech is left out as silence (lost).

`--parts`: the whole test split of the built-in corpus (speech parts and non-speech clips, one clip at
a time as `speechlm eval` takes them) scored per part (`speechlm.scoring.by_part`) with each strategy, the
default cut's effect on ordinary evaluation.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SR = 16000


def recording(waves: list[np.ndarray], texts: list[str], seconds: float, seed: int = 0):
    """Sentences in order with seeded pauses of 0.3-1.0 s until `seconds`: (wave, reference text, count)."""
    rng = np.random.default_rng(seed)
    parts, refs, total = [], [], 0.0
    for w, t in zip(waves, texts):
        if total >= seconds:
            break
        pause = np.zeros(int(rng.uniform(0.3, 1.0) * SR), np.float32)
        parts += [w, pause]
        refs.append(t)
        total += (len(w) + len(pause)) / SR
    return np.concatenate(parts), " ".join(refs), len(refs)


def whisper_recognizer(model_id: str):
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    from speechlm.model import pretrained

    path = pretrained.resolve(model_id)
    proc = WhisperProcessor.from_pretrained(path)
    model = WhisperForConditionalGeneration.from_pretrained(path).eval()

    def transcribe(batch):
        feats = proc(batch, sampling_rate=SR, return_tensors="pt").input_features
        with torch.no_grad():
            ids = model.generate(feats, max_new_tokens=200)
        return [t.strip() for t in proc.batch_decode(ids, skip_special_tokens=True)]

    return transcribe, 30.0


def load_sentences(data: str) -> list[tuple[np.ndarray, str]]:
    """(16 kHz wave, reference) of a corpus's test split, non-speech clips (empty references) left out."""
    from speechlm import audio
    from speechlm.inference import dataset_clips

    _, clips = dataset_clips(data, "test")
    return [(src if isinstance(src, np.ndarray) else audio.load(src), ref) for _, src, ref in clips if ref]


CONDITIONS = [  # (name, level, white noise floor in dBFS or None, every other sentence this many dB quieter)
    ("clean", 1.0, None, 0),
    ("1/100 level (-40 dB)", 0.01, None, 0),
    ("noise floor -60 dBFS", 1.0, -60.0, 0),
    ("noise floor -55 dBFS", 1.0, -55.0, 0),
    ("noise floor -50 dBFS", 1.0, -50.0, 0),
    ("noise floor -45 dBFS", 1.0, -45.0, 0),
    ("1/100 level, noise floor -80 dBFS", 0.01, -80.0, 0),
    ("every other sentence 10 dB quieter", 1.0, None, 10),
    ("every other sentence 20 dB quieter", 1.0, None, 20),
    ("every other sentence 25 dB quieter", 1.0, None, 25),
    ("every other sentence 30 dB quieter", 1.0, None, 30),
]


def cut_stats(data, thresholds, min_pause):
    """Where the "segments" cuts fall on the sentences joined by the shortest pause (0.3 s), per
    condition and threshold: pauses between sentences with no cut (missed), cuts inside a sentence's
    speech, and seconds of speech in the ranges left out as silence (lost). A sentence's speech runs
    from its first to its last frame within 50 dB of its own loudest 5% (measured on the clean clip)."""
    from speechlm.inference import LongForm
    from speechlm.model.longform.cut import frame_energy_db, segment_windows

    waves = [w for w, _ in data]
    gap = int(0.3 * SR)
    bounds, speech, pos = [], [], 0
    for w in waves:
        e = frame_energy_db(w)
        loud = np.nonzero(e > np.percentile(e, 95) - 50)[0]
        bounds.append((pos, pos + len(w)))
        speech.append((pos + loud[0] * 160, pos + (loud[-1] + 1) * 160))
        pos += len(w) + gap
    rng = np.random.default_rng(0)
    rows = []
    for name, level, noise_db, quieter_db in CONDITIONS:
        x = np.zeros(pos, np.float32)
        for i, ((a, b), w) in enumerate(zip(bounds, waves)):
            x[a:b] = w * level * (10 ** (-quieter_db / 20) if i % 2 else 1.0)
        if noise_db is not None:
            x += (10 ** (noise_db / 20) * rng.standard_normal(len(x))).astype(np.float32)
        loud_db = float(np.percentile(frame_energy_db(x), 95))
        for th in thresholds:
            cut = LongForm(window_seconds=1e6, threshold_db=th, min_pause_seconds=min_pause)  # no window limit
            tiles = segment_windows(x, cut, keep_silent=True)  # pauses only
            kept = segment_windows(x, cut)
            cuts = [s for s, _ in tiles[1:]]
            inside = sum(lo < c < hi for lo, hi in speech for c in cuts)
            missed = sum(not any(hi <= c <= lo for c in cuts) for (_, hi), (lo, _) in zip(speech, speech[1:]))
            covered = np.zeros(len(x), bool)
            for a, b in kept:
                covered[a:b] = True
            lost = sum(int((~covered[lo:hi]).sum()) for lo, hi in speech) / SR
            rows.append(
                {
                    "condition": name,
                    "loud_level_db": round(loud_db, 1),
                    "threshold_db": th,
                    "pauses": len(bounds) - 1,
                    "missed": int(missed),
                    "cuts_inside_speech": int(inside),
                    "speech_lost_s": round(lost, 2),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv=None):
    from speechlm.model.longform import settings as longform

    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", default=None, help="a speechlm model (default: Whisper tiny.en)")
    ap.add_argument("--whisper", default="offline/whisper-tiny.en")
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--data", default="shards/synthetic")
    ap.add_argument("--windows", type=float, nargs="+", default=[10.0, 20.0, 30.0], help="for pause and overlap")
    ap.add_argument("--overlap", type=float, default=2.0)
    ap.add_argument("--merge", type=float, nargs="+", default=[0.0, 5.0, 10.0], help="segments' merge_seconds")
    ap.add_argument("--thresholds", type=float, nargs="+", default=[longform.THRESHOLD_DB], help="segments' dB")
    ap.add_argument("--min-pause", type=float, default=longform.MIN_PAUSE_SECONDS)
    ap.add_argument("--segments-window", type=float, default=None, help="segments' window (default: 20 s)")
    ap.add_argument(
        "--keep-before",
        type=float,
        nargs="+",
        default=[longform.KEEP_BEFORE_SECONDS],
        help="silence kept before speech",
    )
    ap.add_argument(
        "--keep-after", type=float, nargs="+", default=[longform.KEEP_AFTER_SECONDS], help="silence kept after speech"
    )
    ap.add_argument("--strategies", nargs="+", default=None, help="default: all (speechlm.inference.STRATEGIES)")
    ap.add_argument("--singles-default", action="store_true", help="also: one by one through the default strategy")
    ap.add_argument("--cuts", action="store_true", help="no model: where the segments cuts fall (see above)")
    ap.add_argument("--parts", action="store_true", help="the test split's parts through `speechlm eval`, per strategy")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from speechlm import inference
    from speechlm.model.longform.batching import transcribe_long
    from speechlm.model.longform.cut import windows
    from speechlm.model.longform.settings import LongForm
    from speechlm.scoring import wer

    data = load_sentences(args.data)
    if args.cuts:
        rows = cut_stats(data, args.thresholds, args.min_pause)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
        return
    if args.parts:
        from speechlm.scoring import by_part

        model, rows = inference.load_model(args.model), []
        for strategy in args.strategies or longform.STRATEGIES:
            res = inference.evaluate(
                model, args.data, split="test", batch_size=16, long_form=LongForm(strategy=strategy)
            )
            parts = by_part.score(res["rows"], "test")
            rows.append({"strategy": strategy, **{p: by_part.metrics({p: r}, "test") for p, r in parts.items()}})
            print(json.dumps(rows[-1]), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
        return
    wave, reference, n = recording([w for w, _ in data], [r for _, r in data], args.minutes * 60)
    if args.model:
        model = inference.load_model(args.model)
        transcribe, limit = model.transcribe, model.family.max_seconds or max(args.windows)
    else:
        transcribe, limit = whisper_recognizer(args.whisper)
    print(f"recording: {n} sentences, {len(wave) / SR:.1f} s", flush=True)
    refs = [r for _, r in data[:n]]
    singles = []
    for i in range(0, n, 16):
        singles += transcribe([w for w, _ in data[i : min(i + 16, n)]])
    base = wer.score(refs, singles)
    rows = [
        {
            "setting": "one sentence at a time",
            "wer": round(base["wer"], 4),
            "ratio": 1.0,
            "substitutions": base["substitutions"],
            "deletions": base["deletions"],
            "insertions": base["insertions"],
        }
    ]
    print(json.dumps(rows[-1]), flush=True)
    default_window = min(args.segments_window or inference.WINDOW_SECONDS, limit)
    if args.singles_default:
        texts = transcribe_long(transcribe, [w for w, _ in data[:n]], LongForm(window_seconds=default_window), 16)
        s = wer.score(refs, texts)
        rows.append(
            {
                "setting": f"one sentence at a time, cut by the default ({longform.DEFAULT_STRATEGY})",
                "wer": round(s["wer"], 4),
                "ratio": round(s["wer"] / base["wer"], 2) if base["wer"] else None,
                "substitutions": s["substitutions"],
                "deletions": s["deletions"],
                "insertions": s["insertions"],
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    settings = []  # (name, LongForm)
    for strategy in args.strategies or longform.STRATEGIES:
        if strategy == "segments":
            for th in args.thresholds:
                for before, after in itertools.product(args.keep_before, args.keep_after):
                    for merge in args.merge:
                        cut = LongForm(
                            strategy=strategy,
                            window_seconds=default_window,
                            threshold_db=th,
                            min_pause_seconds=args.min_pause,
                            merge_seconds=merge,
                            keep_before_seconds=before,
                            keep_after_seconds=after,
                        )
                        name = (
                            f"segments, merge {merge:g} s, {th:g} dB, pause >= {args.min_pause:g} s, "
                            f"keep {before:g} s before / {after:g} s after, window {default_window:g} s"
                        )
                        settings.append((name, cut))
            continue
        for window in args.windows:
            if window > limit:
                continue
            name = f"{strategy} {window:g} s" + (f" (overlap {args.overlap:g} s)" if strategy == "overlap" else "")
            settings.append((name, LongForm(strategy=strategy, window_seconds=window, overlap_seconds=args.overlap)))
    for name, cut in settings:
        text = transcribe_long(transcribe, [wave], cut, batch_size=16)[0]
        s = wer.score([reference], [text])
        spans = windows(wave, cut)
        rows.append(
            {
                "setting": name,
                "windows": len(spans),
                "wer": round(s["wer"], 4),
                "ratio": round(s["wer"] / base["wer"], 2) if base["wer"] else None,
                "substitutions": s["substitutions"],
                "deletions": s["deletions"],
                "insertions": s["insertions"],
                "text_tail": text[-120:],
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
