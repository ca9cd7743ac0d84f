#!/usr/bin/env python
"""Batches cut by duration against batches cut by estimated tokens (`data.bucket_by`), on the same clips.

    python bench/bucket_tokens.py [--clips 96] [--threads 2] [--objective lm|ctc] [--config demo_multilingual]
        [key=value overrides]

Takes a seeded sample of the recipe's training clips, sorts it both ways (the loader's own costs:
`TrainLoader(bucket_by="tokens").cost`), cuts batches of the recipe's size, collates them with the real
Collator and times the LM step (forward and backward) of every batch twice: a first epoch's (every clip
encoded) and a later epoch's (the encoder's output read from `training.encoder_cache_gb`'s cache), the
two orders' batches interleaved so that the machine's load falls on both alike. Sorting by tokens puts
unlike durations together, so the encoder pads more: the first pass counts it. Prints per order and
pass: padded and real tokens, and the seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--clips", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--objective", choices=("lm", "ctc"), default="lm", help="ctc: the warm start's step")
    ap.add_argument("--config", default="demo_multilingual")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from recipe_parts import samples as labelled
    from recipe_parts import train_model

    from speechlm import inference as ev
    from speechlm.data import TrainLoader
    from speechlm.demo.multilingual_report import clip_labels

    cfg, model, col = train_model(args.config, ["training.encoder_cache_gb=2", *args.overrides])
    loader = TrainLoader(cfg.data.train, col, batch_size=cfg.training.per_device_train_batch_size, bucket_by="tokens")
    cat, cost = loader.catalog, loader.cost
    pick = np.sort(np.random.default_rng(0).choice(cat.num_clips, size=args.clips, replace=False))
    ids = [cat.locate(int(g))[1] for g in pick]
    path = cfg.data.train[0].path
    labels = clip_labels(Path(path), "train")
    _, clips = ev.dataset_clips(path, "train")  # decoded by the training reader
    wanted = set(ids)
    samples = {x["id"]: x for x in labelled(path, "train", [c for c in clips if c[0] in wanted])}
    bs = cfg.training.per_device_train_batch_size
    _epoch_padding(loader, col, labels)
    orders = {
        "seconds": [ids[i] for i in np.argsort(cat.durations[pick], kind="stable")],
        "tokens": [ids[i] for i in np.argsort(cost[pick], kind="stable")],
    }
    batches = {k: [col([samples[c] for c in v[i : i + bs]]) for i in range(0, len(v), bs)] for k, v in orders.items()}
    got = {k: {"padded": 0, "real": 0, "frames": 0, "real_frames": 0, "first": 0.0, "later": 0.0} for k in orders}
    for k in orders:
        for b in batches[k]:
            got[k]["padded"] += b["input_ids"].numel()
            got[k]["real"] += int(b["attention_mask"].sum())
            got[k]["frames"] += b["feature_mask"].numel()  # what the encoder and the CTC head compute on
            got[k]["real_frames"] += int(b["feature_mask"].sum())
    for epoch in ("first", "later"):  # the first pass fills the cache, the second reads it
        for i in range(len(batches["seconds"])):
            for k in orders:
                t0 = time.perf_counter()
                _step(model, batches[k][i], args.objective)
                got[k][epoch] += time.perf_counter() - t0
    for k, v in got.items():
        print(
            f"by {k}: {len(batches[k])} batches of {bs}, {v['padded']} tokens padded ({v['real']} real, "
            f"padding {1 - v['real'] / v['padded']:.1%}), audio frames padding "
            f"{1 - v['real_frames'] / v['frames']:.1%}; "
            f"{args.objective} steps {v['first']:.1f} s encoding, "
            f"{v['later']:.1f} s from the cache"
        )
    s, t = got["seconds"], got["tokens"]
    print(
        f"tokens/seconds: padded tokens {t['padded'] / s['padded']:.3f}x, {args.objective} steps "
        f"{t['first'] / s['first']:.3f}x "
        f"encoding, {t['later'] / s['later']:.3f}x from the cache"
    )


def _epoch_padding(loader, col, labels, epochs: int = 3) -> None:
    """Per epoch of the loader's plan (every clip, its blocks as the trainer cuts them), the padded tokens
    both ways; a clip's tokens: the prompt's, its audio placeholders (the collator's count) and its
    answer's (the tokenizer's, opening included), with end-of-turn."""
    from speechlm import text
    from speechlm.data.epoch_plan import plan_epoch

    cat, tok = loader.catalog, col.tokenizer
    fixed = len(col.prompt_ids(0)) + 1
    n = np.zeros(cat.num_clips)
    for g in range(cat.num_clips):
        meta = labels[cat.locate(g)[1]]
        lang, answer = meta.get("language"), ""
        if lang:
            into = "en" if meta.get("task") == "translate" else None
            answer = text.answer_prefix(lang, into) + (meta.get("target_text") if into else meta.get("text", ""))
        audio = col.num_audio_tokens(round(cat.durations[g] * 16000))
        n[g] = fixed + audio + len(tok(answer, add_special_tokens=False)["input_ids"])
    kw = dict(world_size=1, num_workers=1, shards_per_block=loader.block, batch_size=loader.batch_size)
    for e in range(epochs):
        padded = {}
        for k, cost in (("seconds", None), ("tokens", loader.cost)):
            plan = plan_epoch(cat, loader.weights, seed=loader.seed, epoch=e, cost=cost, **kw)
            batches = [b for r in plan.workers for w in r for blk in w for b in blk.batches if b is not None]
            padded[k] = sum(n[b].max() * len(b) for b in batches)
        print(
            f"epoch {e}: {n.sum():.0f} tokens; padded by seconds {padded['seconds']:.0f} "
            f"({1 - n.sum() / padded['seconds']:.1%} padding), by tokens {padded['tokens']:.0f} "
            f"({1 - n.sum() / padded['tokens']:.1%}): {padded['tokens'] / padded['seconds']:.3f}x"
        )


def _step(model, b, objective: str):
    out = model(**b, objective=objective)
    out.loss.backward()
    model.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
