#!/usr/bin/env python
"""Step time per part of the demo recipe (real Whisper tiny.en + SmolLM2-135M with LoRA) on CPU.

    python bench/demo_parts.py [--steps 4] [--threads 2] [--objective lm|ctc] [--config demo] [key=value overrides]

Builds the model the demo trains (speechlm/recipes/demo.yaml, offline real weights), collates
batches of the built-in corpus's training clips with the real Collator, and times separately:
the frozen encoder's forward (no grad), and the projector + decoder forward and backward to the
loss (label-position logits only, as the trainer computes them). Compare precisions with
`training.bf16=true model.model_dtype=bfloat16` (the production settings); the CTC warm start's
step with `--objective ctc` (speechlm.model.ctc: no decoder pass); the template's default system
turn with `model.system_prompt=null`. Times are process CPU seconds as well as wall seconds, since
the machine may be shared. `--config demo_multilingual` times the multilingual demo's recipe (Whisper
base, the multilingual corpus, detect-or-pin answers: its batches carry each clip's language and task).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--objective", choices=("lm", "ctc"), default="lm")
    ap.add_argument("--config", default="demo", help="trainer recipe (demo_multilingual: the multilingual demo)")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from recipe_parts import samples as labelled
    from recipe_parts import train_model

    from speechlm import inference as ev

    # no encoder cache: each step's encoder is timed on its own, and the step then encodes again
    cfg, model, col = train_model(args.config, ["training.encoder_cache_gb=0", *args.overrides])
    need = cfg.training.per_device_train_batch_size * (args.steps + 1)
    _, clips = ev.dataset_clips(cfg.data.train[0].path, "train", n=need)  # decoded by the training reader
    samples = labelled(cfg.data.train[0].path, "train", clips)
    bs = cfg.training.per_device_train_batch_size
    enc_t, dec_t, cpu_t = [], [], []
    for s in range(args.steps + 1):  # the first step warms up and is not counted
        b = col(samples[s * bs : (s + 1) * bs])
        t0 = time.perf_counter()
        with torch.no_grad(), model._autocast(torch.device("cpu")):
            model.encode_audio(b["input_features"], b["feature_mask"])
        t1 = time.perf_counter()
        c1 = time.process_time()
        out = model(**b, objective=args.objective)  # encodes again; subtract the encoder time measured above
        out.loss.backward()
        t2 = time.perf_counter()
        c2 = time.process_time()
        model.zero_grad(set_to_none=True)
        if s:
            enc_t.append(t1 - t0)
            dec_t.append((t2 - t1) - (t1 - t0))
            cpu_t.append(c2 - c1)
        print(
            f"step {s}: encoder {t1 - t0:.2f} s, projector+decoder fwd+bwd {(t2 - t1) - (t1 - t0):.2f} s, "
            f"whole {args.objective} step {c2 - c1:.2f} CPU-s, {b['input_ids'].shape[1]} tokens x {bs}",
            flush=True,
        )
    print(
        f"median over {args.steps}: encoder {statistics.median(enc_t):.2f} s, "
        f"projector+decoder {statistics.median(dec_t):.2f} s per batch of {bs}; "
        f"whole {args.objective} step (encoder included) {statistics.median(cpu_t):.2f} CPU-s"
    )


if __name__ == "__main__":
    main()
