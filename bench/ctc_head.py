#!/usr/bin/env python
"""The CTC head's log-sum-exp over the vocabulary: one chunk's checkpoint (recomputed in the backward,
with its scaling and log-sum-exp) vs speechlm.model.ctc's `_ChunkedLSE` (the backward recomputes the
chunk's logits once and reads its softmax off the saved log-sum-exp), side by side in one process.

    python bench/ctc_head.py [--frames 320] [--vocab 49152] [--hidden 576] [--repeats 5] [--threads 2]

Defaults are the multilingual demo's CTC step (8 clips x ~40 frames, SmolLM2's table, fp32). Prints the
median wall time of forward + backward for each and the largest difference of the lse and of the
frames' gradient (the same arithmetic, summed in another order).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from speechlm.model import ctc  # noqa: E402


def reference(x, rows, inv_norm, n):
    """The head before `_ChunkedLSE` (its code at commit fdc1cd4): each chunk checkpointed."""

    def lse(c):
        return torch.logsumexp(ctc.COSINE_SCALE * (c.to(rows.dtype) @ rows.T).float() * inv_norm, -1)

    return torch.cat([checkpoint(lse, c, use_reentrant=False) for c in x.split(n)])


def chunked(x, rows, inv_norm, n):
    return ctc._ChunkedLSE.apply(x, rows, ctc.COSINE_SCALE * inv_norm, n)


def timed(fn, x, rows, inv_norm, n, repeats):
    times, out, grad = [], None, None
    for i in range(repeats + 1):  # the first call warms up
        xi = x.detach().requires_grad_()
        t0 = time.perf_counter()
        out = fn(xi, rows, inv_norm, n)
        out.sum().backward()
        if i:
            times.append(time.perf_counter() - t0)
        grad = xi.grad
    return statistics.median(times), out.detach(), grad


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=320)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--hidden", type=int, default=576)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x = F.normalize(torch.randn(args.frames, args.hidden), dim=-1)
    rows = torch.randn(args.vocab, args.hidden) * 0.02
    inv_norm = 1.0 / rows.norm(dim=-1)
    n = ctc.chunk_frames(args.vocab)
    t_ref, lse_ref, g_ref = timed(reference, x, rows, inv_norm, n, args.repeats)
    t_new, lse_new, g_new = timed(chunked, x, rows, inv_norm, n, args.repeats)
    print(f"{args.frames} frames x {args.vocab} rows x {args.hidden}, chunks of {n} frames, {args.threads} threads")
    print(f"checkpointed chunks: {t_ref * 1e3:.0f} ms forward + backward")
    print(f"_ChunkedLSE:         {t_new * 1e3:.0f} ms ({t_new / t_ref:.2f}x)")
    print(
        f"largest difference: lse {(lse_new - lse_ref).abs().max().item():.2e} "
        f"(of {lse_ref.abs().max().item():.1f}), gradient {(g_new - g_ref).abs().max().item():.2e} "
        f"(of {g_ref.abs().max().item():.2e})"
    )


if __name__ == "__main__":
    main()
