#!/usr/bin/env python
"""Long-form transcription: cutting at pauses vs fixed overlapping windows merged at the seams.

    python bench/longform.py [-m MODEL | --whisper offline/whisper-tiny.en] [--minutes 3] [--threads 2]

The recording: the built-in corpus's held-out test sentences (shards/synthetic, split test; never
in training), concatenated in order with pauses of 0.3-1.0 s (seeded), ~3 minutes. The baseline is
the same sentences transcribed one by one; each long-form setting transcribes the whole recording
(speechlm.longform.transcribe_long, windows batched). Reported per setting: WER of the recording
against the joined references, its ratio to the per-sentence WER, and its deletions and
insertions beside the per-sentence ones (words dropped or repeated at seams show up there).
The recognizer is a speechlm model (-m) or Whisper tiny.en's own generate (an ASR that needs no
training here; windows of at most 30 s).
"""

from __future__ import annotations

import argparse
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

    from speechlm import pretrained

    path = pretrained.resolve(model_id)
    proc = WhisperProcessor.from_pretrained(path)
    model = WhisperForConditionalGeneration.from_pretrained(path).eval()

    def transcribe(batch):
        feats = proc(batch, sampling_rate=SR, return_tensors="pt").input_features
        with torch.no_grad():
            ids = model.generate(feats, max_new_tokens=200)
        return [t.strip() for t in proc.batch_decode(ids, skip_special_tokens=True)]

    return transcribe, 30.0


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", default=None, help="a speechlm model (default: Whisper tiny.en)")
    ap.add_argument("--whisper", default="offline/whisper-tiny.en")
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--data", default="shards/synthetic")
    ap.add_argument("--windows", type=float, nargs="+", default=[10.0, 20.0, 30.0])
    ap.add_argument("--overlap", type=float, default=2.0)
    ap.add_argument("--strategies", nargs="+", default=None, help="default: all (speechlm.longform.STRATEGIES)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from speechlm import audio, longform, wer
    from speechlm.eval import dataset_clips

    _, clips = dataset_clips(args.data, "test")
    data = [(audio.load(src), ref) for _, src, ref in clips]
    wave, reference, n = recording([w for w, _ in data], [r for _, r in data], args.minutes * 60)
    if args.model:
        from speechlm.eval import load_model

        model = load_model(args.model)
        transcribe, limit = model.transcribe, model.family.max_seconds or max(args.windows)
    else:
        transcribe, limit = whisper_recognizer(args.whisper)
    print(f"recording: {n} sentences, {len(wave) / SR:.1f} s", flush=True)
    singles = []
    for i in range(0, n, 16):
        singles += transcribe([w for w, _ in data[i : min(i + 16, n)]])
    base = wer.score([r for _, r in data[:n]], singles)
    rows = [
        {
            "setting": "one sentence at a time",
            "wer": round(base["wer"], 4),
            "ratio": 1.0,
            "deletions": base["deletions"],
            "insertions": base["insertions"],
        }
    ]
    print(json.dumps(rows[-1]), flush=True)
    for strategy in args.strategies or longform.STRATEGIES:
        for window in args.windows:
            if window > limit:
                continue
            text = longform.transcribe_long(
                transcribe, [wave], window, strategy=strategy, overlap_seconds=args.overlap, batch_size=16
            )[0]
            s = wer.score([reference], [text])
            spans = longform.windows(wave, strategy, window, args.overlap)
            name = f"{strategy} {window:g} s" + (f" (overlap {args.overlap:g} s)" if strategy == "overlap" else "")
            rows.append(
                {
                    "setting": name,
                    "windows": len(spans),
                    "wer": round(s["wer"], 4),
                    "ratio": round(s["wer"] / base["wer"], 2) if base["wer"] else None,
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
