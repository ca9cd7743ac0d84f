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

import contextlib

import torch
import torch.nn.functional as F

COSINE_SCALE = 20.0  # logits = 20 x cosine: a confident frame can beat ~50k other tokens


def _gathered(weight: torch.Tensor):
    """ZeRO-3 keeps a frozen weight partitioned outside its module's forward: gather it to read it."""
    if hasattr(weight, "ds_id"):
        import deepspeed

        return deepspeed.zero.GatheredParameters([weight], modifier_rank=None)
    return contextlib.nullcontext()


def transcript_targets(labels: torch.Tensor) -> list[torch.Tensor]:
    """Per row, the transcript's token ids: the label positions without the closing end-of-turn."""
    return [row[row != -100][:-1] for row in labels]


def ctc_loss(model, input_features, feature_mask, labels, weight=None):
    """(mean CTC loss per clip, number of target tokens) of the projector's output against the
    transcripts, over the decoder's vocabulary. A clip with an empty transcript (non-speech) is
    taught all-blank."""
    proj, lengths = model.encode_audio(input_features, feature_mask)
    return projected_ctc_loss(model, proj, lengths, labels, weight)


def projected_ctc_loss(model, proj, lengths, labels, weight=None):
    """ctc_loss from projected frames the caller already has (the LM step's auxiliary loss)."""
    emb = model._base_lm().get_input_embeddings()
    with _gathered(emb.weight):
        table = F.normalize(emb.weight.detach().float(), dim=-1)
        blank = F.normalize(model.projector.ctc_blank.float(), dim=-1)
        logits = COSINE_SCALE * F.normalize(proj.float(), dim=-1) @ torch.cat([table, blank[None]]).T  # [B, L, V+1]
    logp = logits.log_softmax(-1).transpose(0, 1)  # [L, B, V] as ctc_loss wants
    targets = transcript_targets(labels)
    target_lengths = torch.tensor([len(t) for t in targets], device=logp.device)
    flat = torch.cat(targets) if targets else torch.zeros(0, dtype=torch.long)
    per_clip = F.ctc_loss(
        logp,
        flat.to(logp.device),
        lengths.to(logp.device),
        target_lengths,
        blank=logits.shape[-1] - 1,
        reduction="none",
        zero_infinity=True,
    )
    per_clip = per_clip / target_lengths.clamp_min(1)
    w = torch.ones_like(per_clip) if weight is None else weight.to(per_clip.device, torch.float32)
    num = w.sum()
    loss = (per_clip * w).sum() / num if num > 0 else (per_clip * w).sum()
    return loss, (target_lengths.float() * w).sum().detach()
