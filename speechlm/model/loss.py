"""Per-token cross-entropy of the LM head over label positions, without materializing the
[label tokens, vocab] logits: a chunked torch version everywhere, Liger's fused linear
cross-entropy on CUDA when liger-kernel is installed.

At Qwen3.5's vocabulary (248,320) every label token's logits cost ~1 MiB per fp32 copy; the
production batch has ~17k label tokens, so the plain `F.cross_entropy(head(h))` holds tens of
GiB at once (logits, their fp32 upcast, log-softmax, gradient). Here at most one chunk of
logits is alive: the forward keeps only the per-token losses, the backward recomputes each
chunk's logits (torch.utils.checkpoint), so peak memory is O(chunk x vocab).
"""

from __future__ import annotations

import functools
import importlib.util
import logging

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

# logits elements alive per chunk: 2^27 = 512 MiB per fp32 copy (540 tokens at Qwen3.5's vocabulary)
LOGIT_ELEMENTS_PER_CHUNK = 2**27
MIN_CHUNK_TOKENS = 16


def chunk_tokens(vocab_size: int) -> int:
    """Label tokens per chunk for a vocabulary: a fixed logits budget, not a fixed token count."""
    return max(MIN_CHUNK_TOKENS, LOGIT_ELEMENTS_PER_CHUNK // max(1, vocab_size))


LIGER_MIN_VERSION = "0.8.5"  # reduction="none" with per-token upstream gradients (checked in its source)


@functools.cache
def liger_available() -> bool:
    """liger-kernel importable (it needs triton, i.e. a CUDA/ROCm machine) and recent enough."""
    if importlib.util.find_spec("liger_kernel") is None:
        return False
    from importlib.metadata import PackageNotFoundError, version

    from packaging.version import Version

    try:
        if Version(version("liger-kernel")) < Version(LIGER_MIN_VERSION):
            return False
    except PackageNotFoundError:
        return False
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss  # noqa: F401
    except Exception:  # installed but broken (no triton, wrong torch): the torch path is correct anyway
        return False
    return True


def fused_loss_kind(head: nn.Module, device: torch.device) -> tuple[str, str]:
    """(kind, why): "liger" or "chunked" for this LM head on this device."""
    if device.type != "cuda":
        return "chunked", "not on CUDA"
    if not liger_available():
        return "chunked", f"liger-kernel>={LIGER_MIN_VERSION} not installed"
    if type(head) is not nn.Linear:  # a LoRA-wrapped or custom head: only its own forward is exact
        return "chunked", f"the LM head is a {type(head).__name__}, not a plain Linear"
    if hasattr(head.weight, "ds_id"):  # ZeRO-3: the weight is a partition outside the module's forward
        return "chunked", "ZeRO-3 partitions the LM head weight"
    return "liger", "liger-kernel fused linear cross-entropy"


def head_vocab(head: nn.Module) -> int:
    """Output size of the LM head (under ZeRO-3 its weight is an empty partition; ds_shape is the real one)."""
    return getattr(head, "out_features", None) or getattr(head.weight, "ds_shape", head.weight.shape)[0]


def _chunk_ce(head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    # exactly the unfused computation: the head's own forward (tied, LoRA, autocast), fp32 CE
    return F.cross_entropy(head(hidden).float(), targets, reduction="none")


@functools.cache
def _warn_once(msg: str) -> None:
    logging.getLogger(__name__).warning(msg)


def _zero3(head: nn.Module) -> bool:
    return any(hasattr(p, "ds_id") for p in head.parameters())


def _n_chunks(hidden: torch.Tensor, chunk: int, zero3: bool) -> int:
    k = max(1, -(-hidden.shape[0] // chunk))  # one (possibly empty) chunk at least: the head runs on every batch
    if zero3 and torch.distributed.is_initialized():
        # under ZeRO-3 every call of the head gathers its weight (a collective): all ranks must call
        # it equally often, in the forward and in the backward's recompute (pitfall 2)
        t = torch.tensor([k], device=hidden.device)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        k = int(t.item())
    return k


def chunked_token_ce(
    head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, chunk: int | None = None
) -> torch.Tensor:
    """Per-token CE [N] (fp32) of `head(hidden)` [N, V] against `targets` [N], one chunk of rows at a time."""
    chunk = chunk or chunk_tokens(head_vocab(head))
    grad = torch.is_grad_enabled()
    zero3 = _zero3(head)
    trains = [p.requires_grad for p in head.parameters()]
    # The backward recomputes each chunk's logits (torch.utils.checkpoint), non-reentrant. Under
    # ZeRO-3 that recompute sees a frozen parameter as its empty partition and fails its metadata
    # check (DeepSpeed 0.19; transformers #47254), while reentrant recompute would reduce a trained
    # one's gradient once per chunk: a frozen head recomputes reentrantly (its input `hidden` needs
    # the gradient whenever anything below trains), a trained one non-reentrantly, and a head that
    # mixes both (LoRA on lm_head) is not recomputed: its chunks keep their logits (unfused memory).
    recompute = grad and (not zero3 or not any(trains) and hidden.requires_grad or all(trains))
    if zero3 and grad and not recompute and any(trains):
        _warn_once(
            "ZeRO-3 with a partly trained LM head (LoRA on lm_head): the loss keeps every chunk's "
            "logits for the backward (unfused memory)"
        )
    reentrant = zero3 and not any(trains)
    out = []
    for i in range(_n_chunks(hidden, chunk, zero3)):
        h, t = hidden[i * chunk : (i + 1) * chunk], targets[i * chunk : (i + 1) * chunk]
        # the chunk's inputs are views of `hidden`: nothing of size vocab is kept for the backward
        out.append(checkpoint(_chunk_ce, head, h, t, use_reentrant=reentrant) if recompute else _chunk_ce(head, h, t))
    return torch.cat(out)


def liger_token_ce(head: nn.Linear, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-token CE [N] through Liger's fused kernel (reduction="none": per-token upstream gradients)."""
    from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

    weight, bias = head.weight, head.bias
    if torch.is_autocast_enabled(hidden.device.type):  # what F.linear would compute in under autocast
        dtype = torch.get_autocast_dtype(hidden.device.type)
        hidden, weight = hidden.to(dtype), weight.to(dtype)
        bias = bias.to(dtype) if bias is not None else None
    elif hidden.dtype != weight.dtype:
        hidden = hidden.to(weight.dtype)
    return LigerFusedLinearCrossEntropyLoss(reduction="none")(weight, hidden, targets, bias).float()


def token_cross_entropy(
    head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, chunk: int | None = None
) -> torch.Tensor:
    """Per-token CE of the LM head over label positions, through the best kernel available."""
    kind, _ = fused_loss_kind(head, hidden.device)
    if kind == "liger" and hidden.shape[0] > 0:
        return liger_token_ce(head, hidden, targets)
    return chunked_token_ce(head, hidden, targets, chunk)


# --------------------------------------------------------------------------- the configured component

# by compute-dtype bytes, per logit: the backward's peak (saved fp32 log-softmax + the fp32 gradient
# in and out of it); measured 12.0-12.1 for bf16 and fp32 by bench/loss_memory.py (docs/benchmarks.md)
LOGIT_BYTES = {2: 12, 4: 12}


class TokenLoss:
    """`training.loss`: per-token losses [N] (fp32) of the LM head over the decoder states at label
    positions, and the logits memory it holds at its peak, which the planner counts."""

    name = ""

    def __call__(self, head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def logits_bytes(self, label_tokens: int, vocab_size: int, compute_bytes: int) -> float:
        raise NotImplementedError

    def describe(self, vocab_size: int) -> str:
        return self.name


class ChunkedCrossEntropy(TokenLoss):
    """Cross-entropy without the [N, vocab] logits at once: chunked torch, or Liger's fused kernel on CUDA."""

    name = "chunked_ce"

    def __call__(self, head, hidden, targets):
        return token_cross_entropy(head, hidden, targets)

    def logits_bytes(self, label_tokens, vocab_size, compute_bytes):
        # one chunk of label logits at a time (an upper bound for Liger's fused kernel)
        return min(label_tokens, chunk_tokens(vocab_size)) * vocab_size * LOGIT_BYTES[compute_bytes]

    def describe(self, vocab_size):
        return (
            f"chunked torch cross-entropy, {chunk_tokens(vocab_size)} label tokens of logits "
            "at a time (an upper bound for Liger's fused kernel)"
        )


class FullCrossEntropy(TokenLoss):
    """Plain cross-entropy over all label logits at once (the reference: exact, memory-hungry)."""

    name = "full_ce"

    def __call__(self, head, hidden, targets):
        return _chunk_ce(head, hidden, targets)

    def logits_bytes(self, label_tokens, vocab_size, compute_bytes):
        return label_tokens * vocab_size * LOGIT_BYTES[compute_bytes]

    def describe(self, vocab_size):
        return "plain cross-entropy, every label token's logits at once"


LOSSES: dict[str, type[TokenLoss]] = {cls.name: cls for cls in (ChunkedCrossEntropy, FullCrossEntropy)}
