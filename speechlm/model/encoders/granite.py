"""Granite Speech 5: the conformer encoder of the `GraniteSpeech5ForCTC` hub checkpoints.

Features: `GraniteFeatures` (stacked log-mel + deltas, [B, T, 320], 50 frames/s), in pure torch:
transformers' `GraniteSpeech5FeatureExtractor` computes them through torchaudio, which can't be
installed beside every torch build. The math is the same (`torch.stft` and
`transformers.audio_utils.mel_filter_bank`), checked against the real extractor
(tests/model/assets/granite_features_ref.npz): power mel spectrogram (HTK scale, no filter norm, centered
reflect-padded STFT, periodic Hann window of win_length zero-padded to n_fft), log10 with a floor
`logmel_floor_db` under the clip's maximum, `/4 + 1`, deltas over `delta_win_length` frames, mel and
delta concatenated, then pairs of frames stacked: [T, 4 * num_mel_bins].

Each subsampling block halves time (`subsample_layers`), so a clip of N samples gets
ceil((N // 160) / 2) frames, halved per block. BatchNorm lives in its conv modules: the encoder is
in eval mode always, trained or not, so the pretrained running statistics never move (pitfall 12).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import GraniteSpeech5Encoder, GraniteSpeech5EncoderConfig
from transformers.audio_utils import mel_filter_bank

from .base import EncoderFamily, LogMelFeatures


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
class GraniteFeatures(LogMelFeatures):
    n_fft: int = 512
    win_length: int = 400
    delta_win_length: int = 3
    logmel_floor_db: float = 8.0

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
        self._window = self.hann_window(self.win_length)

    @property
    def feature_size(self) -> int:
        return self.num_mel_bins * 2 * self.frame_stacking

    @property
    def frames_per_second(self) -> float:
        return self.sampling_rate / self.hop_length / self.frame_stacking

    @property
    def min_samples(self) -> int:
        # the STFT's centre padding reflects n_fft // 2 samples at each end: a shorter batch has none to reflect
        return max(self.hop_length, self.n_fft // 2 + 1, self.min_input)

    def num_feature_frames(self, num_samples: int) -> int:
        return -(-(int(num_samples) // self.hop_length) // self.frame_stacking)

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
    def extract(self, audio: torch.Tensor, lengths: list[int] | None = None) -> torch.Tensor:
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


class GraniteSpeech5Family(EncoderFamily):
    name = "granite_speech5"
    pretrained_class = GraniteSpeech5Encoder  # the hub checkpoints are ...ForCTC: the bare encoder loads ("encoder.")

    @staticmethod
    def encoder_config(config) -> GraniteSpeech5EncoderConfig:
        config = getattr(config, "encoder_config", config)
        if not isinstance(config, GraniteSpeech5EncoderConfig):
            raise ValueError(f"expected a Granite Speech 5 config, got model_type '{config.model_type}'")
        return config

    def make_features(self, settings: dict | None) -> GraniteFeatures:
        if settings:
            return GraniteFeatures.from_dict(settings)
        return GraniteFeatures(num_mel_bins=self.config.num_mel_bins)

    def conv_layers(self) -> list[list[int]]:
        # each subsampling block pools pairs of frames, dropping a trailing odd one
        return [[0, 2, 2] for _ in self.config.subsample_layers]

    def after_load(self, encoder, dtype: torch.dtype) -> GraniteSpeech5Encoder:
        # transformers keeps conv.norm (BatchNorm) in fp32, while DeepSpeed bf16 casts parameters but not
        # buffers: make every tensor one dtype on purpose so no mixed-dtype BatchNorm can happen.
        return encoder.to(dtype)

    def encode(self, encoder, input_features, feature_mask):
        out = encoder(input_features, attention_mask=feature_mask)
        return out.last_hidden_state, out.attention_mask.long().sum(-1)

    def set_mode(self, encoder, training: bool, trainable: bool) -> None:
        encoder.eval()  # always: BatchNorm statistics must never move (pitfall 12)

    def layer_rates(self, num_layers: int) -> list[float]:
        # the subsampling blocks halve time after their layer: later layers see 1/2, 1/4 of the frames
        sub = set(getattr(self.config, "subsample_layers", None) or ())
        rates, rate = [], 1.0
        for i in range(num_layers):
            rates.append(rate)
            rate *= 0.5 if i in sub else 1.0
        return rates

    @staticmethod
    def build_tiny(out: Path) -> None:
        """The tiny twin: a small `GraniteSpeech5ForCTC` (the hub checkpoints' class) and its
        preprocessor_config.json."""
        from transformers import GraniteSpeech5CTCConfig, GraniteSpeech5ForCTC

        torch.manual_seed(0)
        enc = GraniteSpeech5EncoderConfig(
            vocab_size=64,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_mel_bins=80,
            max_position_embeddings=64,
            context_size=32,
            conv_kernel_size=5,
            subsample_layers=[0, 1],
        )
        model = GraniteSpeech5ForCTC(GraniteSpeech5CTCConfig(vocab_size=64, encoder_config=enc))
        # a "pretrained" encoder has non-trivial BatchNorm statistics; make them so, so that a
        # BatchNorm wrongly left in train mode (pitfall 12) changes outputs and moves the stats
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, torch.nn.BatchNorm1d):
                    m.running_mean.uniform_(-0.5, 0.5)
                    m.running_var.uniform_(0.5, 2.0)
        model.save_pretrained(out)
        fe = {"feature_extractor_type": "GraniteSpeech5FeatureExtractor", **GraniteFeatures().to_dict()}
        (out / "preprocessor_config.json").write_text(json.dumps(fe, indent=2) + "\n")


FAMILY = GraniteSpeech5Family
# what a model folder's code carries of this file (speechlm.model.folder.generate)
EXPORT = ("compute_deltas", "num_feature_frames", "GraniteFeatures", "GraniteSpeech5Family")
