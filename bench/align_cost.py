#!/usr/bin/env python
"""What word timestamps from the CTC head cost beside transcription (speechlm.model.align).

    python bench/align_cost.py [--encoder tiny/granite_speech5] [--decoder tiny/qwen3_5] [--stride 2]
        [--clips 32] [--batch 8] [--repeats 3] [--threads 2]

A tiny twin (random weights; the cost does not depend on what they learned) transcribes `--clips`
espeak-ng sentences of the built-in grammar in batches of `--batch` (`SpeechLM.transcribe`, greedy);
then, per batch, the same clips get word timestamps for the generated texts and, apart, for the
reference texts (a trained model's texts are about that long; a random twin's are often empty or
run to its token budget): alignment alone from posteriors already at hand (the Viterbi over the
batch and the grouping into words: what a route that keeps the projector's output from transcription
pays), and posteriors plus alignment of the references (`word_timestamps`: the encoder and projector
run a second time). Reported per clip in ms, each as a share of transcription's time; best of
`--repeats`.
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import torch


def best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoder", default="tiny/granite_speech5")
    ap.add_argument("--decoder", default="tiny/qwen3_5")
    ap.add_argument("--stride", type=int, default=2)
    ap.add_argument("--clips", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from speechlm.config import Config, ModelConfig
    from speechlm.demo import grammar
    from speechlm.model import align, build_model

    cfg = ModelConfig(
        audio_model_id=args.encoder,
        text_model_id=args.decoder,
        projector_hidden_dim=64,
        projector_pool_stride=args.stride,
        lora_rank=4,
        lora_alpha=8,
    )
    model = build_model(Config(model=cfg))
    refs = grammar.sentences({"test": args.clips}, seed=0)["test"]
    waves = [grammar.synthesize((t, "en-us", 160, 50)) for t in refs]
    frame_s = align.frame_seconds(model.family, args.stride)
    rows = {"transcribe": 0.0, "align (hyp)": 0.0, "align (ref)": 0.0, "posteriors+align (ref)": 0.0}
    placed = total = 0
    for i in range(0, len(waves), args.batch):
        w, r = waves[i : i + args.batch], refs[i : i + args.batch]
        hyps = model.transcribe(w)
        rows["transcribe"] += best_of(args.repeats, partial(model.transcribe, w))
        logp = align.clip_posteriors(model, w)
        for name, texts in (("align (hyp)", hyps), ("align (ref)", r)):
            ids = [align.transcript_ids(model.tokenizer, t) for t in texts]
            run = partial(align.align_words_batch, logp, ids, model.tokenizer, frame_s, model.audio_token_id)
            rows[name] += best_of(args.repeats, run)
        rows["posteriors+align (ref)"] += best_of(args.repeats, partial(align.word_timestamps, model, w, r))
        words = align.word_timestamps(model, w, hyps)
        placed += sum(x.placed for ws in words for x in ws)
        total += sum(len(ws) for ws in words)
    seconds = sum(len(x) for x in waves) / 16000
    print(
        f"{args.encoder} + {args.decoder}, stride {args.stride} ({frame_s * 1000:.0f} ms frames): {len(waves)} clips "
        f"of {seconds / len(waves):.1f} s, batch {args.batch}, {args.threads} threads; "
        f"generated words placed: {placed}/{total}"
    )
    base = rows["transcribe"]
    print("| step | ms per clip | share of transcribe |\n|---|---|---|")
    for name, t in rows.items():
        print(f"| {name} | {1000 * t / len(waves):.2f} | {t / base:.3f} |")


if __name__ == "__main__":
    main()
