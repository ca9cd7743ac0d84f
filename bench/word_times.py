#!/usr/bin/env python
"""Word timestamps: boundary error of a speechlm model's CTC-head times beside Whisper tiny.en's own
(transformers' pipeline, return_timestamps="word", cross-attention DTW with openai-whisper's alignment
heads for tiny.en), on the same clips with true word times; and what the times cost in speed.

    python bench/word_times.py -m outputs/demo/final [--data timed] [--speed-clips 64] [--threads 2]

Boundary error: `shards/timed` (built first when missing: espeak-ng words spoken one by one and joined
with measured silences, so each word's start and end are exact; speechlm/demo/timed.py), words matched
by jiwer's alignment of normalized words (speechlm.scoring.boundaries). Rows split by the clip's word pool
(common English words / the demo corpus's words). Speed: RTFx (audio seconds per wall second) of
`transcribe_waves` and `transcribe_timed` on the same clips, alternating, at each batch size.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# openai-whisper's alignment-head mask for tiny.en, decoded (layer, head): shared/README.md
TINY_EN_HEADS = [[1, 0], [2, 0], [2, 5], [3, 0], [3, 1], [3, 2], [3, 3], [3, 4]]


def timed_clips(data: str):
    """[(id, wave, text, true words)] of the timed set's test split."""
    from speechlm.inference import dataset_clips

    _, clips = dataset_clips(data, "test", None, 16)
    rows = [(cid, wave, text) for cid, wave, text in clips]
    return [(cid, wave, text, clips.words[cid]) for cid, wave, text in rows]


def whisper_words(model_id: str, waves) -> list[list[dict]]:
    from transformers import pipeline

    from speechlm.model import ids

    asr = pipeline("automatic-speech-recognition", model=ids.resolve(model_id), device="cpu")
    asr.model.generation_config.alignment_heads = TINY_EN_HEADS
    out = []
    for w in waves:
        chunks = asr({"raw": w, "sampling_rate": 16000}, return_timestamps="word")["chunks"]
        out.append([{"text": c["text"].strip(), "start": c["timestamp"][0], "end": c["timestamp"][1]} for c in chunks])
    return out


def boundary_rows(name: str, clips, hyps) -> list[dict]:
    from speechlm.scoring.boundaries import score_boundaries

    rows = []
    for pool in ("common", "demo"):
        scored = [score_boundaries(t, h) for (cid, _, _, t), h in zip(clips, hyps) if f"-{pool}-" in cid]
        if scored:
            rows.append({"system": name, "pool": pool, **sum(scored[1:], scored[0]).summary()})
    return rows


def speed_rows(model, waves, batch_sizes, repeats: int) -> list[dict]:
    from speechlm.inference import transcribe_timed, transcribe_waves

    seconds = sum(len(w) for w in waves) / 16000
    rows = []
    for b in batch_sizes:
        times = {"text": [], "text+words": []}
        for _ in range(repeats):  # alternating, so a load change on the machine hits both alike
            for kind, fn in (("text", transcribe_waves), ("text+words", transcribe_timed)):
                t0 = time.perf_counter()
                fn(model, waves, b)
                times[kind].append(time.perf_counter() - t0)
        plain, words = min(times["text"]), min(times["text+words"])
        rows.append({"batch": b, "rtfx_text": seconds / plain, "rtfx_words": seconds / words, "ratio": words / plain})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--data", default="timed", help="a shard set whose labels carry word times")
    ap.add_argument("--whisper", default="offline/whisper-tiny.en")
    ap.add_argument("--speed-data", default="shards/demo")
    ap.add_argument("--speed-clips", type=int, default=64)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from speechlm.inference import dataset_clips, load_model, transcribe_timed

    clips = timed_clips(args.data)
    waves = [w for _, w, _, _ in clips]
    model = load_model(args.model)
    ours = [r["words"] for r in transcribe_timed(model, waves, 16)]
    rows = boundary_rows("speechlm (CTC head)", clips, ours)
    rows += boundary_rows("Whisper tiny.en (DTW)", clips, whisper_words(args.whisper, waves))
    _, speech = dataset_clips(args.speed_data, "test", args.speed_clips, 16)
    speed = speed_rows(model, [w for _, w, _ in speech], args.batch_sizes, args.repeats)
    for r in rows + speed:
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}))
    if args.json:
        Path(args.json).write_text(json.dumps({"boundaries": rows, "speed": speed}, indent=1))


if __name__ == "__main__":
    main()
