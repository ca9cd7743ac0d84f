"""Peak memory of one training step: logits at label positions only vs full logits.

The tiny twin's encoder + a tiny Qwen3.5 decoder with Qwen3.5's real vocabulary (248,320), LoRA on,
bf16 autocast. Each mode runs in its own process; we report the peak RSS growth of the step
(forward + backward) over the process's RSS after building the model.

    python bench/logits_memory.py [--batch 4] [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


def one(mode: str, batch_size: int, seconds: float) -> dict:
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    sys.path[:0] = [root, os.path.join(root, "tests")]
    from model_helpers import batch, tiny_config, waves
    from speechlm import text
    from speechlm.model import build, ids
    from speechlm.model.encoders import family_for
    from speechlm.model.parts import load_encoder, text_config

    torch.manual_seed(0)
    cfg = tiny_config()
    dec_cfg = text_config(AutoModelForCausalLM.from_pretrained(ids.resolve("tiny/qwen3_5")).config)
    dec_cfg.vocab_size = 248320
    decoder = AutoModelForCausalLM.from_config(dec_cfg).to(torch.bfloat16)
    family = family_for("tiny/granite_speech5")
    encoder = load_encoder(family, "tiny/granite_speech5", torch.bfloat16)
    tok = text.load_tokenizer(ids.resolve("tiny/qwen3_5"))
    model = build.assemble(cfg, encoder, decoder, tok, build.trainable_parts(cfg.model, cfg.training), family)
    model.train()
    n = int(16000 * seconds)
    b = batch(model, waves([n] * batch_size), transcripts=["the quick brown fox jumps over the lazy dog"] * batch_size)
    base = rss_mib()
    t0 = time.perf_counter()
    if mode == "label_positions":
        loss = model(**b).loss
    else:  # what a stock causal-LM loss does: logits for every position, then CE
        with model._autocast(torch.device("cpu")):
            embeds = model.embed(b["input_ids"], b["input_features"], b["feature_mask"])
            logits = model.decoder(inputs_embeds=embeds, attention_mask=b["attention_mask"]).logits
        loss = F.cross_entropy(logits[:, :-1].float().flatten(0, 1), b["labels"][:, 1:].flatten())
    loss.backward()
    step_s = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "mode": mode,
        "seq_len": b["input_ids"].shape[1],
        "label_tokens": int((b["labels"] != -100).sum()),
        "step_peak_growth_mib": round(peak - base, 1),
        "step_s": round(step_s, 2),
        "loss": round(loss.item(), 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--mode", default=None)
    a = ap.parse_args()
    if a.mode:
        print(json.dumps(one(a.mode, a.batch, a.seconds)))
        return
    for mode in ("full_logits", "label_positions"):
        out = subprocess.run(
            [sys.executable, __file__, "--mode", mode, "--batch", str(a.batch), "--seconds", str(a.seconds)],
            capture_output=True,
            text=True,
            check=True,
        )
        print(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
