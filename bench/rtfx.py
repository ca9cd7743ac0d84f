#!/usr/bin/env python
"""Inference speed (RTFx: audio seconds per second) of a speechlm model at several batch sizes, with
Whisper tiny.en's own `generate` on the same clips beside it, and eval's old loop vs its new one.

    python bench/rtfx.py -m outputs/demo [--clips 64] [--batch-sizes 1 8 32] [--threads 2]

Clips: the first N of the built-in corpus's test split (shards/synthetic, ~3 s espeak-ng sentences).
Rows, all on the same clips in one process, one after the other:
- speechlm at each batch size (speechlm.inference.transcribe_waves: clips sorted by length,
  batched, generate with the KV cache);
- "eval before": the loop `speechlm eval` ran before long-form (batches of 8 in dataset order);
- Whisper tiny.en (`offline/whisper-tiny.en`, WhisperForConditionalGeneration.generate, its stock
  30 s padded features) at each batch size.
Wall RTFx is audio / wall seconds; CPU RTFx is audio / process CPU seconds (a fairer figure on a
shared machine: compare rows by it when other jobs load the cores).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--clips", type=int, default=64)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", default="shards/synthetic")
    ap.add_argument("--whisper", default="offline/whisper-tiny.en")
    ap.add_argument("--json", default=None, help="write the rows here too")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from speechlm import audio
    from speechlm.inference import dataset_clips, load_model, transcribe_waves
    from speechlm.model import pretrained
    from speechlm.scoring import wer

    _, clips = dataset_clips(args.data, "test")
    data = [(wave, ref) for _, (_cid, wave, ref) in zip(range(args.clips), clips)]  # decoded by the reader
    waves, refs = [w for w, _ in data], [r for _, r in data]
    seconds = sum(len(w) for w in waves) / audio.SAMPLE_RATE
    model = load_model(args.model)
    tokenizer = model.tokenizer
    rows = []

    def row(name, batch, texts, wall, cpu):
        r = {
            "system": name,
            "batch": batch,
            "clips": len(waves),
            "audio_s": round(seconds, 1),
            "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2),
            "rtfx": round(seconds / wall, 2),
            "cpu_rtfx": round(seconds / cpu, 2),
            "wer": round(wer.score(refs, texts)["wer"], 4),
            "new_tokens_per_clip": round(sum(len(tokenizer(t)["input_ids"]) for t in texts) / len(texts), 1),
        }
        rows.append(r)
        print(json.dumps(r), flush=True)

    model.transcribe(waves[:2])  # warm-up (first-call allocations)
    for b in args.batch_sizes:
        texts, wall, cpu = timed(lambda b=b: transcribe_waves(model, waves, batch_size=b))
        row("speechlm", b, texts, wall, cpu)

    def old_eval_loop():  # `speechlm eval` before this change: batches of 8 in dataset order
        out = []
        for i in range(0, len(waves), 8):
            out.extend(model.transcribe(waves[i : i + 8]))
        return out

    texts, wall, cpu = timed(old_eval_loop)
    row("speechlm eval before (batch 8, dataset order)", 8, texts, wall, cpu)

    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    path = pretrained.resolve(args.whisper)
    proc = WhisperProcessor.from_pretrained(path)
    whisper = WhisperForConditionalGeneration.from_pretrained(path).eval()

    def whisper_generate(b):
        out = []
        for i in range(0, len(waves), b):
            feats = proc(waves[i : i + b], sampling_rate=16000, return_tensors="pt").input_features
            with torch.no_grad():
                ids = whisper.generate(feats, max_new_tokens=64)
            out.extend(t.strip() for t in proc.batch_decode(ids, skip_special_tokens=True))
        return out

    for b in args.batch_sizes:
        texts, wall, cpu = timed(lambda b=b: whisper_generate(b))
        row("whisper tiny.en generate", b, texts, wall, cpu)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
