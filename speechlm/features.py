"""Granite Speech 5 log-mel features in pure torch (the frame arithmetic lives in speechlm.model.encoders.granite).

transformers' `GraniteSpeech5FeatureExtractor` computes these features through torchaudio, which
can't be installed beside every torch build. This module does the same math with `torch.stft` and
`transformers.audio_utils.mel_filter_bank`, so features are identical on every machine (checked
against the real extractor: tests/data/granite_features_ref.npz).

Pipeline per clip (as in the original): power mel spectrogram (HTK scale, no filter norm, centered
reflect-padded STFT, periodic Hann window of win_length zero-padded to n_fft), log10 with a floor
`logmel_floor_db` under the clip's maximum, `/4 + 1`, deltas over `delta_win_length` frames, mel and
delta concatenated, then pairs of frames stacked: [T, 4 * num_mel_bins].
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np
import torch
from transformers.audio_utils import mel_filter_bank

SAMPLE_RATE = 16000


def compute_deltas(specgram: torch.Tensor, win_length: int = 3) -> torch.Tensor:
    """torchaudio.functional.compute_deltas: regression deltas along the last (time) axis.

    d_t = sum_{n=1..N} n (c_{t+n} - c_{t-n}) / (2 sum n^2), edges replicate-padded.
    """
    if win_length < 3:
        raise ValueError(f"delta win_length must be >= 3, got {win_length}")
    n = (win_length - 1) // 2
    denom = n * (n + 1) * (2 * n + 1) / 3
    shape = specgram.shape
    x = specgram.reshape(1, -1, shape[-1])
    x = torch.nn.functional.pad(x, (n, n), mode="replicate")
    kernel = torch.arange(-n, n + 1, dtype=x.dtype, device=x.device).repeat(x.shape[1], 1, 1)
    out = torch.nn.functional.conv1d(x, kernel, groups=x.shape[1]) / denom
    return out.reshape(shape)


def num_feature_frames(num_samples: int) -> int:
    """Encoder input frames for a clip: mel frames (num_samples // hop) stacked in pairs, rounded up."""
    return -(-(int(num_samples) // 160) // 2)


@dataclass
class FeatureExtractor:
    num_mel_bins: int = 80
    sampling_rate: int = SAMPLE_RATE
    n_fft: int = 512
    win_length: int = 400
    hop_length: int = 160
    delta_win_length: int = 3
    logmel_floor_db: float = 8.0
    padding_value: float = 0.0

    # hard-wired in the Granite Speech 5 encoder: each mel frame + its delta, pairs of frames stacked
    frame_stacking = 2

    def __post_init__(self):
        if self.win_length > self.n_fft:
            raise ValueError(f"win_length {self.win_length} > n_fft {self.n_fft}")
        fb = mel_filter_bank(
            num_frequency_bins=self.n_fft // 2 + 1,
            num_mel_filters=self.num_mel_bins,
            min_frequency=0.0,
            max_frequency=self.sampling_rate / 2,
            sampling_rate=self.sampling_rate,
            norm=None,
            mel_scale="htk",
        )
        self._mel_fb = torch.from_numpy(fb).float()  # [n_freqs, n_mels]
        self._window = torch.hann_window(self.win_length, periodic=True)

    @property
    def feature_size(self) -> int:
        return self.num_mel_bins * 2 * self.frame_stacking

    @property
    def frames_per_second(self) -> float:
        return self.sampling_rate / self.hop_length / self.frame_stacking

    @property
    def min_samples(self) -> int:
        return self.hop_length

    def num_feature_frames(self, num_samples: int) -> int:
        return -(-(int(num_samples) // self.hop_length) // self.frame_stacking)

    # ------------------------------------------------------------------ settings
    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "FeatureExtractor":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown feature extractor settings: {sorted(unknown)}")
        return cls(**d)

    # ------------------------------------------------------------------ features
    def _mel(self, audio: torch.Tensor) -> torch.Tensor:
        spec = torch.stft(
            audio,
            n_fft=self.n_fft,
            hop_length=self.hop_length,
            win_length=self.win_length,
            window=self._window.to(audio.device),
            center=True,
            pad_mode="reflect",
            normalized=False,
            onesided=True,
            return_complex=True,
        )
        power = spec.abs().pow(2.0)  # [B, n_freqs, frames]
        return torch.matmul(power.transpose(-1, -2), self._mel_fb.to(audio.device)).transpose(-1, -2)

    @torch.no_grad()
    def extract(self, audio: torch.Tensor) -> torch.Tensor:
        """Padded batch [B, N] float32 -> stacked features [B, T, feature_size]."""
        batch = audio.shape[0]
        mel_frames = audio.shape[1] // self.hop_length
        num_frames = self.frame_stacking * -(-mel_frames // self.frame_stacking)
        # right-pad so the trailing partial frame-stacking group is filled rather than dropped
        needed = (num_frames - 1) * self.hop_length + 1
        if audio.shape[1] < needed:
            audio = torch.nn.functional.pad(audio, (0, needed - audio.shape[1]))
        mel = self._mel(audio.float())[..., :num_frames]
        logmel = mel.clamp_min(1e-10).log10()
        mx = logmel.amax(dim=(-2, -1), keepdim=True)
        logmel = torch.maximum(logmel, mx - self.logmel_floor_db) / 4 + 1
        deltas = compute_deltas(logmel, win_length=self.delta_win_length)
        feats = torch.cat((logmel, deltas), dim=-2).transpose(-1, -2)
        return feats.reshape(batch, -1, self.frame_stacking * feats.shape[-1]).contiguous()

    def __call__(self, waves: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        """Clips (1-D float arrays at 16 kHz) -> (input_features [B,T,F] float32, feature_mask [B,T] long).

        Clips are right-padded with `padding_value` to the longest; the mask marks each clip's
        ceil((samples // hop) / 2) real frames, as the original's attention_mask does.
        """
        if len(waves) == 0:
            raise ValueError("FeatureExtractor got an empty batch")
        lengths = []
        for i, w in enumerate(waves):
            a = np.asarray(w)
            if a.ndim != 1:
                raise ValueError(f"clip {i}: expected 1-D mono audio, got shape {a.shape}")
            if a.shape[0] < self.hop_length:
                raise ValueError(f"clip {i}: {a.shape[0]} samples is shorter than one hop ({self.hop_length})")
            lengths.append(a.shape[0])
        buf = np.full((len(waves), max(lengths)), self.padding_value, dtype=np.float32)
        for i, w in enumerate(waves):
            buf[i, : lengths[i]] = w
        feats = self.extract(torch.from_numpy(buf))
        counts = torch.tensor([self.num_feature_frames(n) for n in lengths])
        mask = (torch.arange(feats.shape[1])[None, :] < counts[:, None]).long()
        return feats.float(), mask
