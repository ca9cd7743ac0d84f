"""Audio projector: stack k encoder frames, norm, Linear -> GELU -> Linear into the decoder's width.

It also holds the CTC head's blank (`ctc_blank`, one vector of the decoder's width): the CTC head
scores each projected frame against the decoder's frozen input embeddings (speechlm.model.ctc), and
the blank needs a row of its own that the decoder's vocabulary does not have. Keeping it here, rather
than as an extra embedding row for `<audio>`, leaves the decoder's vocabulary as its base model has
it, so a LoRA adapter loads onto the unmodified base with peft alone."""

from __future__ import annotations

import torch
from torch import nn


def pooled_length(length, k: int):
    """Frames the projector emits for `length` encoder frames (works on ints and tensors)."""
    return (length - k) // k + 1


class Projector(nn.Module):
    def __init__(self, encoder_dim: int, decoder_dim: int, hidden_dim: int = 4096, pool_stride: int = 1):
        super().__init__()
        if pool_stride < 1:
            raise ValueError(f"projector pool stride must be >= 1, got {pool_stride}")
        self.k = pool_stride
        self.norm = nn.LayerNorm(encoder_dim * pool_stride)
        self.linear1 = nn.Linear(encoder_dim * pool_stride, hidden_dim)
        self.act = nn.GELU()
        self.linear2 = nn.Linear(hidden_dim, decoder_dim)
        # fixed, as the resized embedding row it replaces was (scale-free: the head compares cosines); a buffer,
        # so it is saved with the projector and DeepSpeed's bf16 mode leaves it fp32
        self.register_buffer("ctc_blank", torch.randn(decoder_dim) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B, L, D] -> [B, (L - k) // k + 1, decoder_dim]; a trailing partial group is dropped."""
        b, length, d = x.shape
        n = max(0, pooled_length(length, self.k))
        x = x[:, : n * self.k].reshape(b, n, self.k * d)
        x = x.to(self.linear1.weight.dtype)
        return self.linear2(self.act(self.linear1(self.norm(x))))

    @torch.no_grad()
    def rescale_output(self, factor: float) -> None:
        """Scale the output (both weight and bias of the last Linear): used by calibration."""
        self.linear2.weight.mul_(factor)
        self.linear2.bias.mul_(factor)
