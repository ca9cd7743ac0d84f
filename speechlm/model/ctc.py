"""A cheap projector warm start: CTC over the decoder's own vocabulary, no decoder forward.

Each projected audio frame is scored against every row of the frozen decoder's input embeddings
(cosine x COSINE_SCALE); the projector's own `ctc_blank` vector, appended as the last row, is the
CTC blank. The CTC loss against
the transcript's token ids teaches the projector to put, at each moment, the embedding of the
token being spoken, so that from its first LM step the decoder reads something close to text
(LegoSLM, arXiv 2505.11352, feeds an LLM CTC posteriors over its vocabulary; CTC-assisted LLM ASR
does the like). A step costs the encoder, the projector and one [frames x vocabulary] product: on
the demo's shape a fraction of an LM step (docs/benchmarks.md). `training.ctc_warmup_steps` runs
the first steps of a run with this loss alone; after them `training.ctc_weight` keeps it beside the
LM loss (on the projected frames the LM step computed anyway), so the head stays trained for word
timestamps (speechlm.model.align).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .align import COSINE_SCALE
from .loss import chunk_tokens


def transcript_targets(labels: torch.Tensor) -> list[torch.Tensor]:
    """Per row, the transcript's token ids: the label positions without the closing end-of-turn."""
    return [row[row != -100][:-1] for row in labels]


def ctc_loss(model, input_features, feature_mask, labels, weight=None):
    """(mean CTC loss per clip, number of target tokens) of the projector's output against the
    transcripts, over the decoder's vocabulary. A clip with an empty transcript (non-speech) is
    taught all-blank."""
    proj, lengths = model.encode_audio(input_features, feature_mask)
    return projected_ctc_loss(model, proj, lengths, labels, weight)


def _cosine_logits(x: torch.Tensor, rows: torch.Tensor, scaled_inv_norm: torch.Tensor) -> torch.Tensor:
    """[N, V] fp32 logits of unit frames `x` [N, H]: cosines against the embedding `rows` (in their own
    dtype: no fp32 copy of the table) times COSINE_SCALE over each row's norm (`scaled_inv_norm` [V])."""
    return (x.to(rows.dtype) @ rows.T).float() * scaled_inv_norm


class _ChunkedLSE(torch.autograd.Function):
    """log-sum-exp over the vocabulary of `_cosine_logits`, one chunk of `n` frames at a time, keeping only
    the [N] result for the backward: there each chunk's logits are recomputed once and its softmax is
    exp(logits - lse), so the backward costs one product for the logits and one for the gradient.
    (A checkpointed chunk recomputed its log-sum-exp as well and backpropagated through its scaling:
    ~25% of a CTC warm-start step on the demo's shape, docs/benchmarks.md.)"""

    @staticmethod
    def forward(ctx, x, rows, scaled_inv_norm, n: int):
        lse = torch.cat([torch.logsumexp(_cosine_logits(c, rows, scaled_inv_norm), -1) for c in x.split(n)])
        ctx.save_for_backward(x, rows, scaled_inv_norm, lse)
        ctx.n = n
        return lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        x, rows, scaled_inv_norm, lse = ctx.saved_tensors
        out = []
        for c, g, l in zip(x.split(ctx.n), grad.split(ctx.n), lse.split(ctx.n)):
            p = _cosine_logits(c, rows, scaled_inv_norm).sub_(l[:, None]).exp_()  # the chunk's softmax
            p.mul_(g[:, None]).mul_(scaled_inv_norm)  # d lse / d (x @ rows.T)
            out.append((p.to(rows.dtype) @ rows).to(x.dtype))
        return torch.cat(out), None, None, None


def chunk_frames(vocab_size: int) -> int:
    """Frames per chunk of the head's [frames, V] logits: a quarter of the LM loss's logits budget
    (loss.chunk_tokens), since the fp32 logits and their softmax in the backward exist at once."""
    return max(1, chunk_tokens(vocab_size) // 4)


def compact_log_probs(x, rows, inv_norm, blank, classes: torch.Tensor) -> torch.Tensor:
    """[N, K + 1] log-probabilities of unit frames `x` [N, H] over `classes` (K token ids) and the blank
    (last), normalized over the whole vocabulary. The [N, V] logits exist one chunk of frames at a time
    (`chunk_frames`), recomputed in the backward (`_ChunkedLSE`), so the head's memory is that of the
    classes a batch's transcripts use, not of the vocabulary (a full [frames, V] over Qwen3.5's 248k
    tokens would be ~190 GiB at production's batch)."""
    scaled = COSINE_SCALE * inv_norm
    vocab = _ChunkedLSE.apply(x, rows, scaled, chunk_frames(rows.shape[0])) if len(x) else x.new_zeros(0)
    lse = torch.logaddexp(vocab, COSINE_SCALE * (x @ blank))
    picked = torch.cat([_cosine_logits(x, rows[classes], scaled[classes]), COSINE_SCALE * (x @ blank)[:, None]], -1)
    return picked - lse[:, None]


def head_inputs(model, proj: torch.Tensor):
    """(unit frames fp32, embedding rows in their dtype (no gradient), the rows' inverse norms fp32, unit
    blank fp32) of the CTC head: the projected frames, the decoder's input embeddings, the projector's blank."""
    emb = model._base_lm().get_input_embeddings()
    if hasattr(emb.weight, "ds_id"):
        # ZeRO-3: the table through the embedding's own forward, whose hooks gather and release it in the
        # order ZeRO-3 traces (a GatheredParameters block here clashes with the tied LM head: pitfall 15)
        rows = emb(torch.arange(emb.num_embeddings, device=proj.device)).detach()
    else:
        rows = emb.weight.detach()
    inv_norm = 1.0 / torch.linalg.vector_norm(rows, dim=-1, dtype=torch.float32).clamp_min(1e-12)
    blank = F.normalize(model.projector.ctc_blank.float(), dim=-1)
    return F.normalize(proj.float(), dim=-1), rows, inv_norm, blank


def projected_ctc_loss(model, proj, lengths, labels, weight=None):
    """ctc_loss from projected frames the caller already has (the LM step's auxiliary loss)."""
    frames, rows, inv_norm, blank = head_inputs(model, proj)
    targets = transcript_targets(labels)
    flat = torch.cat(targets).to(proj.device) if targets else torch.zeros(0, dtype=torch.long, device=proj.device)
    classes, remapped = torch.unique(flat, return_inverse=True)  # the batch's tokens: the head's classes here
    b, length, h = frames.shape
    logp = compact_log_probs(frames.reshape(-1, h), rows, inv_norm, blank, classes)
    logp = logp.reshape(b, length, -1).transpose(0, 1)
    target_lengths = torch.tensor([len(t) for t in targets], device=logp.device)
    per_clip = F.ctc_loss(
        logp,
        remapped,
        lengths.to(logp.device),
        target_lengths,
        blank=logp.shape[-1] - 1,
        reduction="none",
        zero_infinity=True,
    )
    per_clip = per_clip / target_lengths.clamp_min(1)
    w = torch.ones_like(per_clip) if weight is None else weight.to(per_clip.device, torch.float32)
    num = w.sum()
    loss = (per_clip * w).sum() / num if num > 0 else (per_clip * w).sum()
    return loss, (target_lengths.float() * w).sum().detach()
