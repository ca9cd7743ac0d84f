"""The frozen encoder's output per clip, kept in host memory and reused when the clip comes again
(`training.encoder_cache_gb`).

A run of several epochs over a small corpus (the demos: ~2.7 epochs; a user's own few hours) encodes
every clip once per epoch, and a frozen encoder answers the same each time: on the multilingual demo's
CTC warm start the encoder is ~40% of a step (docs/benchmarks.md). Clips are found by the content of
their features (a digest of the clip's own frames, not its id: two shard sets may reuse ids), so a hit is
the same input by construction. Only what the encoder emits for the clip's own frames is kept: the
encoder masks padding, so a clip's frames do not depend on the batch it came in (up to the order of
float sums). Kept in host memory (a GPU's memory is the model's); when the cap is reached, later clips
are encoded each time. A resumed run starts with an empty cache.

Needs what makes the output a function of the features alone: a frozen encoder, no augmentation (the
features would differ every epoch), and ZeRO below stage 3 (stage 3 gathers the encoder's weights with
collectives every rank must join; a rank whose clips were all cached would skip them). `Config.validate`
refuses the rest.
"""

from __future__ import annotations

import hashlib
import logging

import torch
from torch.nn.utils.rnn import pad_sequence

log = logging.getLogger(__name__)


def clip_key(features: torch.Tensor) -> bytes:
    """A digest of one clip's feature frames [T, ...] (its own frames only, shape included)."""
    data = features.detach().contiguous().cpu()
    h = hashlib.blake2b(str((tuple(data.shape), data.dtype)).encode(), digest_size=16)
    h.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    return h.digest()


class EncoderCache:
    def __init__(self, max_gb: float):
        self.max_bytes = int(max_gb * 2**30)
        self.bytes = 0
        self.store: dict[bytes, torch.Tensor] = {}
        self.hits = self.misses = 0
        self._full_logged = False

    def encode(self, run, input_features: torch.Tensor, feature_mask: torch.Tensor):
        """(hidden [B, F, D], frames [B]) as `run(input_features, feature_mask)` (the family's encode)
        returns them, the cached clips read from memory and the rest encoded together; hidden is zero
        past each clip's frames."""
        lengths = feature_mask.long().sum(-1).tolist()
        host = input_features.detach().cpu()  # one copy off the device for the batch, not one per clip
        keys = [clip_key(host[i, :n]) for i, n in enumerate(lengths)]
        missing = [i for i, k in enumerate(keys) if k not in self.store]
        fresh: dict[int, torch.Tensor] = {}
        device = input_features.device
        if missing:
            feats, mask = input_features, feature_mask  # a first epoch's batch: every clip missing, encoded as is
            if len(missing) < len(keys):  # else the missing clips, as a batch of their own
                idx, longest = torch.tensor(missing, device=device), max(lengths[i] for i in missing)
                feats, mask = feats[idx, :longest], mask[idx, :longest]
            hidden, frames = run(feats, mask)
            for j, i in enumerate(missing):
                fresh[i] = hidden[j, : int(frames[j])]
                self._keep(keys[i], fresh[i])
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        rows = [fresh[i] if i in fresh else self.store[k].to(device, non_blocking=True) for i, k in enumerate(keys)]
        frames = torch.tensor([len(r) for r in rows], device=device)
        return pad_sequence(rows, batch_first=True), frames

    def figures(self) -> dict:
        """What the run logs of it (metrics.jsonl, W&B): memory held, and the share of clips read from it."""
        seen = self.hits + self.misses
        return {"perf/encoder_cache_gb": self.bytes / 2**30, "perf/encoder_cache_hit_share": self.hits / max(1, seen)}

    def _keep(self, key: bytes, hidden: torch.Tensor) -> None:
        size = hidden.numel() * hidden.element_size()
        if self.bytes + size > self.max_bytes:
            if not self._full_logged:
                self._full_logged = True
                log.info(
                    "encoder cache full (%.2f GB, %d clips): clips not in it are encoded each time",
                    self.bytes / 2**30,
                    len(self.store),
                )
            return
        self.store[key] = hidden.detach().to("cpu", copy=True)
        self.bytes += size
