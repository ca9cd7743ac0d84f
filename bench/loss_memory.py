"""Peak memory of the label-position loss + its backward: unfused (all [N, vocab] logits at once,
the computation before speechlm.model.loss) vs chunked (speechlm.model.loss.chunked_token_ce).

The LM head is Qwen3.5-2B's: vocabulary 248,320, frozen bf16 weight [V, H], under bf16 autocast as
in training; the decoder's output at N label positions is a bf16 [N, H] tensor that needs a
gradient (LoRA and the projector sit below it). Each (mode, N) runs in its own process; we report
the peak RSS growth of loss + backward over the RSS after building the inputs.

    python bench/loss_memory.py [--hidden 2048] [--unfused 128,256] [--chunked 256,17408] [--fp32]

On a CPU, bf16 matmuls with the vocabulary as the inner dimension (the logits' backward) run
~200x slower than fp32 (oneDNN has no fast path without AVX512-BF16): 40 s for 128 tokens at
H=64. The logits terms do not depend on H, so a small --hidden measures the same N x vocab
memory (the N x H terms, hidden + its gradient, are printed apart), and --fp32 (no autocast)
reaches the production token count in minutes: its per-chunk bytes are those of fp32 logits.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

VOCAB = 248320  # Qwen3.5


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


def one(mode: str, n: int, hidden: int, vocab: int, fp32: bool) -> dict:
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from speechlm.model.loss import chunk_tokens, chunked_token_ce

    torch.manual_seed(0)
    dtype = torch.float32 if fp32 else torch.bfloat16
    head = torch.nn.Linear(hidden, vocab, bias=False, dtype=dtype).requires_grad_(False)
    h = torch.randn(n, hidden, dtype=dtype).requires_grad_(True)
    targets = torch.randint(0, vocab, (n,))
    w = torch.ones(n)
    base = rss_mib()
    t0 = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=not fp32):
        if mode == "unfused":  # SpeechLM.forward before: logits = head(hidden); F.cross_entropy(logits.float())
            ce = F.cross_entropy(head(h).float(), targets, reduction="none")
        else:
            ce = chunked_token_ce(head, h, targets)
    loss = (ce * w).sum() / w.sum()
    loss.backward()
    secs = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "mode": mode,
        "dtype": str(dtype).removeprefix("torch."),
        "label_tokens": n,
        "hidden": hidden,
        "vocab": vocab,
        "chunk_tokens": chunk_tokens(vocab) if mode == "chunked" else n,
        "peak_growth_mib": round(peak - base, 1),
        "hidden_and_grad_mib": round(2 * n * hidden * h.element_size() / 2**20, 1),
        "seconds": round(secs, 1),
        "loss": round(loss.item(), 4),
    }


def run(mode: str, n: int, a) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--one", mode, "--n", str(n), "--hidden", str(a.hidden), "--vocab", str(a.vocab)]
        + (["--fp32"] if a.fp32 else []),
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:  # e.g. killed for memory: report it, the other runs go on
        return {
            "mode": mode,
            "label_tokens": n,
            "hidden": a.hidden,
            "error": (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1],
        }
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=VOCAB)
    ap.add_argument("--unfused", default="128,256", help="label-token counts to run unfused")
    ap.add_argument("--chunked", default="256,1080", help="label-token counts to run chunked")
    ap.add_argument("--fp32", action="store_true", help="fp32 head and states, no autocast (fast on CPU)")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one, a.n, a.hidden, a.vocab, a.fp32)))
        return
    rows = []
    for mode in ("unfused", "chunked"):
        for n in [int(x) for x in getattr(a, mode).split(",") if x]:
            rows.append(run(mode, n, a))
            print(json.dumps(rows[-1]), flush=True)
    un = [r for r in rows if r["mode"] == "unfused" and "error" not in r]
    if len(un) >= 2:  # least-squares slope: the unfused path's memory per label token
        xs, ys = [r["label_tokens"] for r in un], [r["peak_growth_mib"] for r in un]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        print(
            json.dumps(
                {
                    "unfused_mib_per_label_token": round(slope, 3),
                    "unfused_bytes_per_token_per_vocab": round(slope * 2**20 / a.vocab, 2),
                }
            )
        )


if __name__ == "__main__":
    main()
